//! The bot: who may talk, one queue per chat, turns through the service,
//! commands, and the polling loop with its durable offset.
//!
//! **Order and parallelism.** Every update goes to its chat's queue
//! ([`Bot::submit`]); one task per chat answers its updates one at a time
//! in arrival order, and different chats run in parallel.
//!
//! **Acknowledgement.** An update is answered whole before it counts as
//! done: its turn committed (or, for a crisis turn that storage failed,
//! delivered unsaved), every reply message sent, and the chat's registry
//! row updated (`last_update_id`). The polling loop stores the offset of
//! the oldest update not yet done ([`Service::set_channel_cursor`]) and
//! passes only that offset to `getUpdates`, so Telegram never forgets an
//! update before it was answered. After a restart (even `kill -9`) the
//! same updates come again: those already answered are skipped by the
//! chat's `last_update_id`; one whose turn was started
//! (`pending_update_id`) and committed is not run again: its saved reply
//! is read back from the thread and sent.
//!
//! **Who may talk.** Private chats of the allowed user ids only. Anyone
//! else gets one polite refusal per chat (per run) and nothing is stored;
//! group chats get the same.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use opencouch_core::telemetry::CRISIS_ATTRIBUTE;
use opencouch_core::{AgentOutput, Channel, MemoryMode, ResponseType, Role, Route};
use opencouch_runtime::service::{
    Caller, ChatThread, EndedVia, ErrorCode, ExportFormat, ExportRequest, Feedback,
    ForgetMeConfirm, ForgetMeRequest, ItemKind, Service, ServiceError, kit, new_ulid,
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument as _;

use crate::api::{ApiError, BotApi, backoff};
use crate::format::{self, MESSAGE_LIMIT};
use crate::texts;
use crate::types::{CallbackQuery, Message, Update};

/// This channel in the service's vocabulary.
pub const CHANNEL: Channel = Channel::Telegram;

/// How the bot behaves.
#[derive(Debug, Clone)]
pub struct BotOptions {
    /// Telegram user ids allowed to talk (empty: nobody).
    pub allowed_users: Vec<i64>,
    /// Messages in a chat's thread after which it rotates to a new one.
    pub soft_limit: u64,
    /// How long one `getUpdates` long poll waits.
    pub poll_timeout: Duration,
    /// How long a stop waits for updates in progress.
    pub drain_timeout: Duration,
}

impl BotOptions {
    /// The options the settings give.
    pub fn from_settings(s: &opencouch_config::Settings) -> Self {
        BotOptions {
            allowed_users: s.telegram_allowed_users.clone(),
            soft_limit: s.transcript_soft_limit.max(2),
            poll_timeout: Duration::from_secs(25),
            drain_timeout: Duration::from_secs(s.request_timeout_secs.max(1)),
        }
    }
}

/// Why the bot stopped or an update failed.
#[derive(Debug, thiserror::Error)]
pub enum BotError {
    /// The Bot API failed.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The service failed.
    #[error(transparent)]
    Service(#[from] ServiceError),
}

impl BotError {
    /// Whether storage did not answer.
    fn storage_down(&self) -> bool {
        matches!(self, BotError::Service(e) if e.code() == ErrorCode::StorageUnavailable)
    }

    /// Whether trying the same update again later can succeed.
    fn retryable(&self) -> bool {
        match self {
            BotError::Api(e) => e.retryable(),
            BotError::Service(e) => e.code() == ErrorCode::StorageUnavailable,
        }
    }
}

struct Job {
    update: Update,
    done: oneshot::Sender<()>,
}

/// What one update's handling has done so far, kept across its retries so
/// a retry never runs a turn twice or sends a message twice.
#[derive(Default)]
struct Progress {
    /// The chat row as the turn left it (to store once the reply is out).
    row: Option<ChatThread>,
    /// The row could not be read before the turn (storage down): it is
    /// read again, and only its update ids are written, once storage
    /// answers.
    row_unread: bool,
    /// The reply messages (HTML), and how many went out.
    reply: Option<Vec<String>>,
    sent: usize,
}

struct Inner {
    api: BotApi,
    service: Service,
    opts: BotOptions,
    allowed: HashSet<i64>,
    workers: Mutex<HashMap<i64, mpsc::UnboundedSender<Job>>>,
    /// Chats refused during this run (one refusal each).
    refused: Mutex<HashSet<i64>>,
    /// Forget-me tokens waiting for a chat's confirmation button.
    forget_me: Mutex<HashMap<i64, String>>,
    stop: watch::Receiver<bool>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The Telegram bot over one service. Cheap to clone.
#[derive(Clone)]
pub struct Bot {
    inner: Arc<Inner>,
    stop_tx: Arc<watch::Sender<bool>>,
}

impl std::fmt::Debug for Bot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bot")
            .field("allowed_users", &self.inner.allowed.len())
            .finish_non_exhaustive()
    }
}

/// The commands the bot registers (`setMyCommands`).
pub const COMMANDS: &[(&str, &str)] = &[
    ("start", "What this bot is (and is not)"),
    ("sos", "Your safety plan and crisis lines, right now"),
    ("help", "What you can do here"),
    ("end", "End this session, with feedback and a summary"),
    ("incognito", "Start a session that keeps nothing"),
    ("forget", "Delete what I remember about you"),
    ("forgetme", "Delete everything kept for you"),
    ("export", "Get everything kept for you as a file"),
    ("privacy", "What is kept, where, and for how long"),
];

impl Bot {
    /// A bot answering through `service` with `api`.
    pub fn new(api: BotApi, service: Service, opts: BotOptions) -> Bot {
        let (stop_tx, stop) = watch::channel(false);
        if opts.allowed_users.is_empty() {
            tracing::warn!(
                "OPENCOUCH_TELEGRAM_ALLOWED_USERS is empty: the bot refuses everyone until you list the Telegram user ids that may talk to it"
            );
        }
        Bot {
            inner: Arc::new(Inner {
                api,
                service,
                allowed: opts.allowed_users.iter().copied().collect(),
                opts,
                workers: Mutex::new(HashMap::new()),
                refused: Mutex::new(HashSet::new()),
                forget_me: Mutex::new(HashMap::new()),
                stop,
            }),
            stop_tx: Arc::new(stop_tx),
        }
    }

    /// The Bot API client.
    pub fn api(&self) -> &BotApi {
        &self.inner.api
    }

    /// Registers the commands with `setMyCommands`.
    ///
    /// # Errors
    /// The Bot API call failed.
    pub async fn register_commands(&self) -> Result<(), ApiError> {
        self.inner.api.set_my_commands(COMMANDS).await
    }

    /// Queues `update` on its chat's queue; the receiver fires once it was
    /// answered (or could not be and was given up).
    pub fn submit(&self, update: Update) -> oneshot::Receiver<()> {
        let (done, rx) = oneshot::channel();
        let Some(chat) = update.chat_id() else {
            // Nothing to answer (an update kind this bot does not ask for).
            let _ = done.send(());
            return rx;
        };
        let mut workers = lock(&self.inner.workers);
        let job = Job { update, done };
        let job = match workers.get(&chat) {
            Some(tx) => match tx.send(job) {
                Ok(()) => return rx,
                Err(mpsc::error::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, queue) = mpsc::unbounded_channel();
        let _ = tx.send(job);
        workers.insert(chat, tx);
        tokio::spawn(worker(self.inner.clone(), queue));
        rx
    }

    /// Tells workers retrying a failed update to give up (a stop).
    pub fn stop(&self) {
        let _ = self.stop_tx.send(true);
    }

    /// Long polling until `shutdown` resolves: `getUpdates` from the stored
    /// offset, each update to its chat's queue, the offset stored (and only
    /// then confirmed to Telegram) as the oldest update in progress moves
    /// on. On shutdown, waits up to the drain timeout for updates in
    /// progress.
    ///
    /// # Errors
    /// The stored offset could not be read at start.
    pub async fn run_polling(
        &self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), BotError> {
        let inner = &self.inner;
        if let Err(e) = inner.api.delete_webhook().await {
            tracing::warn!(error = %e, "deleteWebhook failed; getUpdates may be refused while a webhook is set");
        }
        if let Err(e) = self.register_commands().await {
            tracing::warn!(error = %e, "setMyCommands failed; the commands still work");
        }
        let mut acked: Option<i64> = inner.service.channel_cursor(CHANNEL).await?;
        // The next update id not yet handed to a queue.
        let mut next: Option<i64> = acked;
        let mut in_progress: BTreeSet<i64> = BTreeSet::new();
        let mut done = FuturesUnordered::new();
        let mut failures = 0u32;
        tokio::pin!(shutdown);
        let poll_timeout = inner.opts.poll_timeout;
        let mut poll = Box::pin(inner.api.get_updates(acked, poll_timeout));
        let mut idle: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(id) = done.next(), if !done.is_empty() => {
                    in_progress.remove(&id);
                    let ack = in_progress.first().copied().or(next);
                    if ack.is_some() && ack != acked {
                        let value = ack.unwrap_or_default();
                        match inner.service.set_channel_cursor(CHANNEL, value).await {
                            Ok(()) => acked = ack,
                            Err(e) => tracing::warn!(error = %e, "could not store the Telegram offset; will retry"),
                        }
                    }
                    if idle.is_some() {
                        idle = None;
                        poll = Box::pin(inner.api.get_updates(acked, poll_timeout));
                    }
                }
                () = async { if let Some(s) = idle.as_mut() { s.await } }, if idle.is_some() => {
                    idle = None;
                    poll = Box::pin(inner.api.get_updates(acked, poll_timeout));
                }
                res = &mut poll, if idle.is_none() => {
                    let mut fresh = 0;
                    match res {
                        Ok(items) => {
                            failures = 0;
                            for item in items {
                                let Some(update) = Update::from_value(item) else { continue };
                                let id = update.update_id;
                                if next.is_some_and(|n| id < n) {
                                    continue; // already in a queue
                                }
                                next = Some(id + 1);
                                fresh += 1;
                                in_progress.insert(id);
                                let rx = self.submit(update);
                                done.push(async move {
                                    let _ = rx.await;
                                    id
                                });
                            }
                            if fresh == 0 && in_progress.is_empty() && next != acked {
                                // Only already-answered updates came: store
                                // the offset past them.
                                if let Some(n) = next
                                    && inner.service.set_channel_cursor(CHANNEL, n).await.is_ok()
                                {
                                    acked = next;
                                }
                            }
                        }
                        Err(e) => {
                            let wait = match &e {
                                ApiError::RetryAfter(s) => Duration::from_secs(*s).min(crate::api::MAX_RETRY_AFTER),
                                _ => backoff(failures),
                            };
                            failures = failures.saturating_add(1);
                            tracing::warn!(error = %e, wait_ms = wait.as_millis() as u64, "getUpdates failed; retrying");
                            idle = Some(Box::pin(tokio::time::sleep(wait)));
                            continue;
                        }
                    }
                    if fresh == 0 && !in_progress.is_empty() {
                        // Telegram answers at once while unconfirmed updates
                        // wait: poll again when one is done, or in a second.
                        idle = Some(Box::pin(tokio::time::sleep(Duration::from_secs(1))));
                    } else {
                        poll = Box::pin(inner.api.get_updates(acked, poll_timeout));
                    }
                }
            }
        }
        drop(poll);
        // Let updates in progress finish, storing the offset as they do.
        let deadline = tokio::time::Instant::now() + inner.opts.drain_timeout;
        while !done.is_empty() {
            match tokio::time::timeout_at(deadline, done.next()).await {
                Ok(Some(id)) => {
                    in_progress.remove(&id);
                    if let Some(ack) = in_progress.first().copied().or(next)
                        && Some(ack) != acked
                        && inner.service.set_channel_cursor(CHANNEL, ack).await.is_ok()
                    {
                        acked = Some(ack);
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
        self.stop();
        Ok(())
    }
}

async fn worker(inner: Arc<Inner>, mut queue: mpsc::UnboundedReceiver<Job>) {
    while let Some(job) = queue.recv().await {
        let span = crate::spans::update(&job.update);
        answer(&inner, &job.update).instrument(span).await;
        let _ = job.done.send(());
    }
}

/// Answers one update, retrying while that can succeed (and the bot is not
/// stopping). Runs inside the update's span.
async fn answer(inner: &Inner, update: &Update) {
    let span = tracing::Span::current();
    let mut progress = Progress::default();
    let mut attempt = 0u32;
    let outcome = loop {
        span.record("telegram.attempts", i64::from(attempt) + 1);
        match inner.handle(update, &mut progress).await {
            Ok(()) => break "answered",
            Err(e) if e.retryable() && !*inner.stop.borrow() => {
                let wait = match &e {
                    BotError::Api(ApiError::RetryAfter(s)) => {
                        Duration::from_secs(*s).min(crate::api::MAX_RETRY_AFTER)
                    }
                    _ => backoff(attempt).max(Duration::from_secs(1)),
                };
                tracing::warn!(error = %e, update_id = update.update_id, "a Telegram update could not be answered yet; retrying");
                attempt = attempt.saturating_add(1);
                let mut stop = inner.stop.clone();
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
            }
            Err(e) => {
                tracing::error!(error = %e, update_id = update.update_id, "a Telegram update could not be answered; giving up on it");
                break "given_up";
            }
        }
    };
    span.record("opencouch.outcome", outcome);
}

/// The owner id of a Telegram user (an account of the service).
pub fn owner_of(user: i64) -> String {
    format!("telegram-{user}")
}

/// A chat's registry row before anything was stored for it.
fn new_row(chat: i64, user: i64) -> ChatThread {
    ChatThread {
        chat_id: chat.to_string(),
        owner: owner_of(user),
        thread_id: base_thread(chat),
        message_count: 0,
        incognito: false,
        last_update_id: None,
        pending_update_id: None,
    }
}

/// A chat's first thread id.
pub fn base_thread(chat: i64) -> String {
    format!("telegram:dm:{chat}")
}

/// A new session thread id of a chat (after a rotation or an end).
pub fn session_thread(chat: i64) -> String {
    format!("telegram:dm:{chat}:session:{}", new_ulid())
}

/// Turns a command text (`/end@my_bot args`) into its name.
fn command_name(text: &str) -> Option<String> {
    let first = text.split_whitespace().next()?;
    let name = first.strip_prefix('/')?;
    let name = name.split('@').next().unwrap_or(name);
    (!name.is_empty()).then(|| name.to_ascii_lowercase())
}

/// A command name as a span value: one of [`COMMANDS`], or `unknown`
/// (never what the person typed).
fn command_label(name: &str) -> &'static str {
    COMMANDS
        .iter()
        .map(|(c, _)| *c)
        .find(|c| *c == name)
        .unwrap_or("unknown")
}

fn keyboard(rows: &[&[(&str, &str)]]) -> Value {
    Value::Array(
        rows.iter()
            .map(|row| {
                Value::Array(
                    row.iter()
                        .map(|(label, data)| json!({"text": label, "callback_data": data}))
                        .collect(),
                )
            })
            .collect(),
    )
}

/// What a person is told when their turn failed.
fn error_text(e: &ServiceError, max_chars: usize) -> String {
    match e.code() {
        ErrorCode::MessageTooLong => format!(
            "That message is longer than I can read at once (up to {max_chars} characters). Could you send it in parts?"
        ),
        ErrorCode::InvalidInput => {
            "I couldn't read that message. Could you send it again as plain text?".to_owned()
        }
        ErrorCode::StorageUnavailable => texts::STORAGE_DOWN.to_owned(),
        _ => texts::SOMETHING_WRONG.to_owned(),
    }
}

/// The messages of a turn's reply.
pub fn reply_messages(out: &AgentOutput) -> Vec<String> {
    let mut msgs = if out.response_type == ResponseType::Crisis || !out.resources.is_empty() {
        format::crisis_messages(&out.response_text, &out.resources)
    } else {
        format::split_message(&out.response_text, MESSAGE_LIMIT)
    };
    if let Some(text) = kit::unsaved_notice(out) {
        let notice = format!("<i>{}</i>", format::escape(text));
        match msgs.last_mut() {
            Some(last) if format::tg_len(last) + 2 + format::tg_len(&notice) <= MESSAGE_LIMIT => {
                last.push_str("\n\n");
                last.push_str(&notice);
            }
            _ => msgs.push(notice),
        }
    }
    msgs
}

impl Inner {
    fn caller(row: &ChatThread) -> Caller {
        Caller::account(row.owner.clone())
    }

    fn mode(row: &ChatThread) -> MemoryMode {
        if row.incognito {
            MemoryMode::Incognito
        } else {
            MemoryMode::Persistent
        }
    }

    /// Sends Telegram HTML; when Telegram refuses the markup (400), the
    /// same words as plain text, so a reply is never lost to formatting.
    async fn send(&self, chat: i64, html: &str, keyboard: Option<&Value>) -> Result<i64, ApiError> {
        match self.api.send_html(chat, html, keyboard).await {
            Err(e) if e.is_bad_request() && keyboard.is_none() => {
                tracing::warn!(error = %e, "Telegram refused a message's markup; sending it as plain text");
                self.api.send_plain(chat, &format::plain_text(html)).await
            }
            other => other,
        }
    }

    /// One refusal per chat per run; nothing stored.
    async fn refuse(&self, chat: i64, text: &str) -> Result<(), BotError> {
        if lock(&self.refused).insert(chat) {
            self.api.send_plain(chat, text).await?;
        }
        Ok(())
    }

    /// Whether the message's chat and sender may talk; refuses them if
    /// not.
    async fn admitted(&self, msg: &Message) -> Result<Option<i64>, BotError> {
        if msg.chat.kind != "private" {
            self.refuse(msg.chat.id, texts::GROUPS_REFUSED).await?;
            return Ok(None);
        }
        let Some(user) = msg.from.as_ref().filter(|u| !u.is_bot).map(|u| u.id) else {
            return Ok(None);
        };
        if !self.allowed.contains(&user) {
            tracing::info!("a Telegram user not on the allow-list was refused");
            self.refuse(msg.chat.id, texts::NOT_ALLOWED).await?;
            return Ok(None);
        }
        Ok(Some(user))
    }

    async fn handle(&self, update: &Update, progress: &mut Progress) -> Result<(), BotError> {
        let span = tracing::Span::current();
        if let Some(msg) = &update.message {
            let admitted = self.admitted(msg).await?;
            span.record("telegram.admitted", admitted.is_some());
            let Some(user) = admitted else {
                return Ok(());
            };
            return match msg.text.as_deref() {
                Some(text) if command_name(text).is_some() => {
                    self.command(msg.chat.id, user, text).await
                }
                Some(text) => {
                    self.turn(msg.chat.id, user, text, update.update_id, progress)
                        .instrument(crate::spans::turn())
                        .await
                }
                None => {
                    self.api.send_plain(msg.chat.id, texts::TEXT_ONLY).await?;
                    Ok(())
                }
            };
        }
        if let Some(msg) = &update.edited_message {
            let admitted = self.admitted(msg).await?.is_some();
            span.record("telegram.admitted", admitted);
            if admitted {
                self.api.send_plain(msg.chat.id, texts::NO_EDITS).await?;
            }
            return Ok(());
        }
        if let Some(cb) = &update.callback_query {
            return self.callback(cb).await;
        }
        Ok(())
    }

    /// The chat's registry row, or a new one (not stored yet).
    async fn row(&self, chat: i64, user: i64) -> Result<ChatThread, BotError> {
        Ok(self
            .service
            .chat_thread(CHANNEL, &chat.to_string())
            .await?
            .unwrap_or_else(|| new_row(chat, user)))
    }

    /// The saved reply of a turn that committed before the process
    /// stopped: the thread's last message when it is the assistant's and
    /// the thread grew past what the registry counted.
    async fn committed_reply(
        &self,
        row: &ChatThread,
    ) -> Result<Option<(Vec<String>, u64)>, BotError> {
        let entries = match self
            .service
            .history(&Self::caller(row), &row.thread_id, 1, None)
            .await
        {
            Ok(e) => e,
            Err(e) if e.code() == ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Some(last) = entries.last() else {
            return Ok(None);
        };
        if last.index < row.message_count || last.message.role != Role::Assistant {
            return Ok(None);
        }
        let saved = &last.message.content;
        if last.message.route != Some(Route::Crisis) {
            return Ok(Some((
                format::split_message(saved, MESSAGE_LIMIT),
                last.index + 1,
            )));
        }
        // A crisis reply goes out as it did: the person's plan where the
        // transcript keeps its placeholder, and the verified lines (for the
        // episode's country when one is known) as tappable links.
        let country = match self
            .service
            .thread(&Self::caller(row), Self::mode(row), &row.thread_id)
            .await
        {
            Ok(Some(state)) => state.crisis_episode.and_then(|e| e.country_code),
            _ => None,
        };
        let sos = self.service.sos(Some(&row.owner), country.as_deref()).await;
        let reply = kit::with_shown_plan(saved, sos.plan_text.as_deref());
        Ok(Some((
            format::crisis_messages(&reply, &sos.resources),
            last.index + 1,
        )))
    }

    /// Ends the row's session (if it has one) and moves the chat to a new
    /// thread.
    async fn rotate(&self, chat: i64, row: &mut ChatThread, incognito: bool) {
        if row.message_count > 0
            && let Err(e) = self
                .service
                .end_session(
                    &Self::caller(row),
                    &row.thread_id,
                    Self::mode(row),
                    None,
                    EndedVia::Api,
                )
                .await
        {
            // The host's sweeper finalizes it once it expires.
            tracing::warn!(error = %e, "could not end a Telegram session at rotation");
        }
        row.thread_id = session_thread(chat);
        row.message_count = 0;
        row.incognito = incognito;
    }

    async fn turn(
        &self,
        chat: i64,
        user: i64,
        text: &str,
        update_id: i64,
        progress: &mut Progress,
    ) -> Result<(), BotError> {
        let span = tracing::Span::current();
        if progress.reply.is_none() {
            let mut row = match self.row(chat, user).await {
                Ok(row) => row,
                Err(e) if e.storage_down() => {
                    // The turn still runs: a crisis message gets its crisis
                    // reply (unsaved), anything else the storage notice.
                    // The registry is written once storage answers again.
                    tracing::warn!(
                        "the Telegram chat registry could not be read; answering anyway"
                    );
                    span.record("telegram.storage", "unavailable");
                    progress.row_unread = true;
                    new_row(chat, user)
                }
                Err(e) => return Err(e),
            };
            if row.last_update_id.is_some_and(|l| l >= update_id) {
                span.record("telegram.resumed", "already_answered");
                return Ok(()); // answered before a restart
            }
            span.record("telegram.incognito", row.incognito);
            if row.pending_update_id == Some(update_id)
                && !row.incognito
                && let Some((reply, count)) = self.committed_reply(&row).await?
            {
                // Committed before the process stopped: send what was saved.
                span.record("telegram.resumed", "saved_reply");
                row.message_count = count;
                progress.reply = Some(reply);
                progress.row = Some(row);
            } else {
                let mut notices = Vec::new();
                let rotate = row.message_count >= self.opts.soft_limit;
                span.record("telegram.rotated", rotate);
                if rotate {
                    let incognito = row.incognito;
                    self.rotate(chat, &mut row, incognito).await;
                    notices.push(format::escape(texts::ROTATED));
                }
                row.pending_update_id = Some(update_id);
                if !progress.row_unread {
                    match self.service.put_chat_thread(CHANNEL, &row).await {
                        Ok(()) => {}
                        // As above: a crisis reply never waits for storage.
                        Err(e) if e.code() == ErrorCode::StorageUnavailable => {
                            tracing::warn!(
                                "the Telegram chat registry could not be written; answering anyway"
                            );
                            span.record("telegram.storage", "unavailable");
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                let typing = self.typing(chat);
                let mut req = opencouch_runtime::service::TurnRequest::new(
                    Self::caller(&row),
                    row.thread_id.clone(),
                    text,
                    CHANNEL,
                );
                if row.incognito {
                    req = req.in_mode(MemoryMode::Incognito);
                }
                let result = self.service.turn(req).await;
                typing.abort();
                let mut msgs = notices;
                match result {
                    Ok(out) => {
                        span.record("opencouch.saved", out.saved);
                        if out.crisis.level.needs_crisis_response() {
                            span.record(CRISIS_ATTRIBUTE, true);
                        }
                        if out.saved {
                            row.message_count += 2;
                        }
                        msgs.extend(reply_messages(&out));
                    }
                    Err(e) => {
                        span.record("opencouch.error_code", e.code().as_str());
                        tracing::warn!(code = e.code().as_str(), "a Telegram turn failed");
                        msgs.push(format::escape(&error_text(
                            &e,
                            self.service.max_message_chars(),
                        )));
                    }
                }
                progress.reply = Some(msgs);
                progress.row = Some(row);
            }
        }
        let msgs = progress.reply.clone().unwrap_or_default();
        span.record("telegram.messages", msgs.len() as i64);
        while progress.sent < msgs.len() {
            self.send(chat, &msgs[progress.sent], None).await?;
            progress.sent += 1;
        }
        if progress.row_unread {
            // The reply went out; now the registry as stored (an error here
            // retries this step only: nothing is sent again).
            progress.row = Some(self.row(chat, user).await?);
            progress.row_unread = false;
        }
        if let Some(row) = progress.row.as_mut() {
            row.last_update_id = Some(update_id);
            row.pending_update_id = None;
            self.service.put_chat_thread(CHANNEL, row).await?;
        }
        Ok(())
    }

    /// Shows "typing…" until the returned task is aborted (Telegram shows
    /// it for about 5 seconds per call).
    fn typing(&self, chat: i64) -> tokio::task::JoinHandle<()> {
        let api = self.api.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = api.typing(chat).await {
                    tracing::debug!(error = %e, "typing indicator not sent");
                }
                tokio::time::sleep(Duration::from_secs(4)).await;
            }
        })
    }

    #[tracing::instrument(
        skip_all,
        name = "telegram_command",
        fields(otel.name = "telegram command", telegram.command = tracing::field::Empty)
    )]
    async fn command(&self, chat: i64, user: i64, text: &str) -> Result<(), BotError> {
        let name = command_name(text).unwrap_or_default();
        tracing::Span::current().record("telegram.command", command_label(&name));
        match name.as_str() {
            "start" => {
                self.send(chat, &format::markdown_to_html(texts::WELCOME), None)
                    .await?;
            }
            "help" => {
                self.send(chat, &format::markdown_to_html(texts::HELP), None)
                    .await?;
            }
            "privacy" => {
                self.send(chat, &format::markdown_to_html(texts::PRIVACY), None)
                    .await?;
            }
            "end" => {
                let row = self.service.chat_thread(CHANNEL, &chat.to_string()).await?;
                if row.is_none_or(|r| r.message_count == 0) {
                    self.api.send_plain(chat, texts::NOTHING_TO_END).await?;
                } else {
                    let k = keyboard(&[&[
                        ("👍 It helped", "end:up"),
                        ("👎 Not really", "end:down"),
                        ("Skip", "end:skip"),
                    ]]);
                    self.send(chat, &format::escape(texts::END_ASK), Some(&k))
                        .await?;
                }
            }
            "incognito" => {
                let mut row = self.row(chat, user).await?;
                if row.incognito {
                    self.api.send_plain(chat, texts::ALREADY_INCOGNITO).await?;
                } else {
                    self.rotate(chat, &mut row, true).await;
                    self.service.put_chat_thread(CHANNEL, &row).await?;
                    self.api.send_plain(chat, texts::INCOGNITO_ON).await?;
                }
            }
            "forget" => {
                let k = keyboard(&[&[
                    ("Yes, delete my memory", "forget:yes"),
                    ("No, keep it", "forget:no"),
                ]]);
                self.send(chat, &format::escape(texts::FORGET_ASK), Some(&k))
                    .await?;
            }
            "forgetme" => {
                let plan = self
                    .service
                    .forget_me_prepare(&ForgetMeRequest {
                        owner: owner_of(user),
                    })
                    .await?;
                match plan.token {
                    Some(token) => {
                        lock(&self.forget_me).insert(chat, token);
                        let k = keyboard(&[&[
                            ("Delete everything", "forgetme:yes"),
                            ("Cancel", "forgetme:no"),
                        ]]);
                        self.send(chat, &format::escape(&plan.message), Some(&k))
                            .await?;
                    }
                    None => {
                        self.api.send_plain(chat, &plan.message).await?;
                    }
                }
            }
            "sos" => {
                // The person's plan and the verified lines: no model, no
                // turn, nothing written.
                let sos = self.service.sos(Some(&owner_of(user)), None).await;
                let mut head = sos.emergency_advice.clone();
                if let Some(plan) = &sos.plan_text {
                    head.push_str("\n\n");
                    head.push_str(plan);
                }
                for m in format::crisis_messages(&head, &sos.resources) {
                    self.send(chat, &m, None).await?;
                }
            }
            "export" => {
                let file = self
                    .service
                    .export(&ExportRequest {
                        owner: owner_of(user),
                        format: ExportFormat::Json,
                    })
                    .await?;
                self.api
                    .send_document(
                        chat,
                        &file.filename,
                        file.media_type,
                        file.body.as_bytes(),
                        texts::EXPORT_CAPTION,
                    )
                    .await?;
            }
            _ => {
                self.api.send_plain(chat, texts::UNKNOWN_COMMAND).await?;
            }
        }
        Ok(())
    }

    #[tracing::instrument(
        skip_all,
        name = "telegram_callback",
        fields(
            otel.name = "telegram callback",
            telegram.button = crate::spans::button_label(cb.data.as_deref().unwrap_or_default()),
            telegram.admitted = tracing::field::Empty,
        )
    )]
    async fn callback(&self, cb: &CallbackQuery) -> Result<(), BotError> {
        let user = cb.from.id;
        let chat = cb.message.as_ref().map_or(user, |m| m.chat.id);
        let private = cb.message.as_ref().is_none_or(|m| m.chat.kind == "private");
        let admitted = self.allowed.contains(&user) && private;
        tracing::Span::current().record("telegram.admitted", admitted);
        if !admitted {
            self.api.answer_callback(&cb.id, None).await?;
            return Ok(());
        }
        self.api.answer_callback(&cb.id, None).await?;
        if let Some(m) = &cb.message
            && let Err(e) = self.api.clear_keyboard(chat, m.message_id).await
        {
            tracing::debug!(error = %e, "could not remove an inline keyboard");
        }
        let data = cb.data.as_deref().unwrap_or_default();
        match data {
            "end:up" | "end:down" | "end:skip" => {
                let feedback = match data {
                    "end:up" => Feedback::Positive,
                    "end:down" => Feedback::Negative,
                    _ => Feedback::Skip,
                };
                let Some(mut row) = self.service.chat_thread(CHANNEL, &chat.to_string()).await?
                else {
                    self.api.send_plain(chat, texts::NOTHING_TO_END).await?;
                    return Ok(());
                };
                if row.message_count == 0 {
                    self.api.send_plain(chat, texts::NOTHING_TO_END).await?;
                    return Ok(());
                }
                let outcome = self
                    .service
                    .end_session(
                        &Self::caller(&row),
                        &row.thread_id,
                        Self::mode(&row),
                        Some(feedback),
                        EndedVia::Api,
                    )
                    .await?;
                // The next message starts a new session, not incognito.
                row.thread_id = session_thread(chat);
                row.message_count = 0;
                row.incognito = false;
                self.service.put_chat_thread(CHANNEL, &row).await?;
                let text = match &outcome.summary {
                    Some(s) if !s.summary.trim().is_empty() => {
                        format!("{}\n\n{}", texts::ENDED_WITH_SUMMARY, s.summary)
                    }
                    _ => format!("{} {}", texts::ENDED, outcome.detail),
                };
                self.send(chat, &format::markdown_to_html(&text), None)
                    .await?;
            }
            "forget:yes" => {
                let n = self
                    .service
                    .memory_clear(
                        &owner_of(user),
                        &[ItemKind::Fact, ItemKind::Session, ItemKind::Rule],
                    )
                    .await?;
                let text = if n == 0 {
                    "There was nothing saved to delete.".to_owned()
                } else {
                    format!(
                        "Done: I deleted {n} saved memory item{}.",
                        if n == 1 { "" } else { "s" }
                    )
                };
                self.api.send_plain(chat, &text).await?;
            }
            "forget:no" | "forgetme:no" => {
                lock(&self.forget_me).remove(&chat);
                self.api.send_plain(chat, texts::NOTHING_DELETED).await?;
            }
            "forgetme:yes" => {
                let token = lock(&self.forget_me).remove(&chat);
                let Some(token) = token else {
                    self.api.send_plain(chat, texts::FORGET_ME_EXPIRED).await?;
                    return Ok(());
                };
                match self
                    .service
                    .forget_me_confirm(&ForgetMeConfirm {
                        owner: owner_of(user),
                        token,
                    })
                    .await
                {
                    Ok(done) => {
                        self.api.send_plain(chat, &done.message).await?;
                    }
                    Err(e)
                        if matches!(
                            e.code(),
                            ErrorCode::ForgetTokenStale | ErrorCode::ForgetTokenUnknown
                        ) =>
                    {
                        self.api.send_plain(chat, texts::FORGET_ME_EXPIRED).await?;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_recognized_with_and_without_the_bot_name() {
        for (text, want) in [
            ("/start", Some("start")),
            ("/END@opencouch_bot", Some("end")),
            ("  /help me", Some("help")),
            ("hello /start", None),
            ("/", None),
            ("plain", None),
        ] {
            assert_eq!(command_name(text).as_deref(), want, "{text}");
        }
    }

    #[test]
    fn command_labels_are_ours_or_unknown() {
        assert_eq!(command_label("end"), "end");
        assert_eq!(command_label("forgetme"), "forgetme");
        assert_eq!(command_label("my private words"), "unknown");
    }

    #[test]
    fn ids_follow_the_channel_scheme() {
        assert_eq!(owner_of(42), "telegram-42");
        assert_eq!(base_thread(42), "telegram:dm:42");
        let rotated = session_thread(42);
        assert!(rotated.starts_with("telegram:dm:42:session:"));
        assert_eq!(rotated.len(), "telegram:dm:42:session:".len() + 26);
        assert!(opencouch_runtime::service::valid_thread_id(&rotated));
        assert!(COMMANDS.iter().all(|(c, _)| c.len() <= 32));
    }
}
