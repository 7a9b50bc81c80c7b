//! One terminal conversation and its command set, shared by the full-screen
//! and the line mode. Everything goes through the service API.
//!
//! [`Session::input`] reads a typed line: a message comes back as
//! [`Outcome::Send`] (the mode streams the turn itself, so it can show and
//! cancel it), a command is run and comes back as a [`Reply`] (text for a
//! person, a JSON object for `--json`, and an [`Effect`] on the screen).
//! A command that needs an answer (feedback, a typed confirmation) sets a
//! question: the next line is its answer.

use std::path::PathBuf;

use chrono::Utc;
use opencouch_config::Settings;
use opencouch_core::{
    AgentOutput, Channel, MemoryMode, ModelTier, ResponseType, Role, RuntimeMode,
};
use opencouch_runtime::service::{
    Caller, EndSessionOutcome, EndedVia, Feedback, ForgetMeConfirm, ForgetMeRequest,
    GUEST_MODE_REPLY, HistoryEntry, Host, ItemKind, PendingForget, SemanticStatus, Service,
    ServiceError, StartOptions, TurnRequest,
};
use serde_json::{Value, json};

use crate::commands::{self, Input};
use crate::diag;
use crate::export;
use crate::theme::ThemeName;

/// How a session starts.
#[derive(Debug, Clone)]
pub struct Options {
    /// The thread to continue (default `cli:default`, or `cli:USER`).
    pub thread: Option<String>,
    /// The person's user id (memory is kept per user; else per thread).
    pub user: Option<String>,
    /// Incognito (guest) or persistent.
    pub memory_mode: MemoryMode,
    /// The model tier of replies.
    pub tier: ModelTier,
    /// Whether `NO_COLOR` is set (mono theme).
    pub no_color: bool,
    /// Where the settings came from (for `/doctor`).
    pub provenance: crate::doctor::Provenance,
}

/// What a typed line asks for.
#[derive(Debug)]
pub enum Outcome {
    /// Send this message as a turn.
    Send(String),
    /// A command ran (or a question was answered).
    Reply(Reply),
}

/// A command's result.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The command's name (`unknown` for an unknown one).
    pub command: String,
    /// Whether it did what was asked.
    pub ok: bool,
    /// What to show.
    pub text: String,
    /// The same as data, for `--json`.
    pub data: Value,
    /// What it changes on the screen.
    pub effect: Effect,
}

impl Reply {
    fn ok(command: &str, text: impl Into<String>, data: Value) -> Reply {
        Reply {
            command: command.to_owned(),
            ok: true,
            text: text.into(),
            data,
            effect: Effect::None,
        }
    }

    fn fail(command: &str, text: impl Into<String>) -> Reply {
        Reply {
            command: command.to_owned(),
            ok: false,
            text: text.into(),
            data: Value::Null,
            effect: Effect::None,
        }
    }

    fn with(mut self, effect: Effect) -> Reply {
        self.effect = effect;
        self
    }

    /// The one JSON object of this result (`--json`).
    pub fn to_json(&self) -> Value {
        json!({
            "type": "command",
            "command": self.command,
            "ok": self.ok,
            "text": self.text,
            "data": self.data,
        })
    }
}

/// What a command changes on the screen.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Nothing.
    None,
    /// Leave.
    Exit,
    /// Clear the transcript on screen.
    Clear,
    /// A question is open: the next line answers it (the prompt).
    Ask(String),
    /// Another thread is now current: show its recent messages.
    Switched(Vec<(Role, String)>),
}

/// The diagnostics panel on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UiMode {
    /// No panel.
    Compact,
    /// The diagnostics panel.
    Full,
}

/// Stage timings printed after turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trace {
    /// Never.
    Off,
    /// After every turn.
    On,
    /// After the next turn only.
    Once,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterEnd {
    Stay,
    NewThread,
    Exit,
}

#[derive(Debug)]
enum Pending {
    EndFeedback {
        via: EndedVia,
        then: AfterEnd,
        next_thread: Option<String>,
    },
    ForgetItem {
        owner: String,
        pending: PendingForget,
    },
    ClearMemory {
        owner: String,
        kinds: &'static [ItemKind],
        what: String,
    },
    ForgetMe {
        owner: String,
        token: String,
    },
}

/// One conversation in the terminal.
pub struct Session {
    settings: Settings,
    provenance: crate::doctor::Provenance,
    start: StartOptions,
    host: Option<Host>,
    service: Service,
    /// The memory mode of this run's turns.
    pub memory_mode: MemoryMode,
    /// The current thread.
    pub thread: String,
    /// The user id, if given.
    pub user: Option<String>,
    /// The reply model tier.
    pub tier: ModelTier,
    /// Verbose shows route and style under replies.
    pub verbose: bool,
    /// Stage timings after turns.
    pub trace: Trace,
    /// The diagnostics panel.
    pub ui: UiMode,
    /// The theme.
    pub theme: ThemeName,
    /// Turns sent in this run (on any thread).
    pub turns: u64,
    /// Turns on the current thread in this run (feedback is asked on
    /// `/exit` after a conversation).
    thread_turns: u64,
    /// The last turn's output (the diagnostics panel).
    pub last: Option<Box<AgentOutput>>,
    /// Whether a crisis episode is open on this thread.
    pub crisis_open: bool,
    /// The verified resources of the last crisis reply (or, on a thread
    /// resumed with its episode open, the directory's lines).
    pub crisis_resources: Vec<Value>,
    /// The person's own safety plan as the crisis panel shows it (empty
    /// without a plan and in incognito).
    pub crisis_plan: Vec<String>,
    pending: Option<Pending>,
}

/// The default thread of a user.
pub fn default_thread(user: Option<&str>) -> String {
    match user {
        Some(u) => format!("cli:{u}"),
        None => "cli:default".to_owned(),
    }
}

impl Session {
    /// Starts the service host and a session on it.
    ///
    /// # Errors
    /// The service could not start.
    pub async fn start(settings: Settings, opts: Options) -> Result<Session, ServiceError> {
        // An incognito run never opens the durable store: nothing of it
        // may touch the disk, not even an empty database file.
        let start = StartOptions {
            in_memory: opts.memory_mode == MemoryMode::Incognito,
            ..StartOptions::default()
        };
        let host = Host::start_with(&settings, start).await?;
        let service = host.service();
        let thread = opts
            .thread
            .clone()
            .unwrap_or_else(|| default_thread(opts.user.as_deref()));
        let mut session = Session {
            settings,
            provenance: opts.provenance,
            start,
            host: Some(host),
            service,
            memory_mode: opts.memory_mode,
            thread,
            user: opts.user,
            tier: opts.tier,
            verbose: false,
            trace: Trace::Off,
            ui: UiMode::Compact,
            theme: ThemeName::initial(opts.no_color),
            turns: 0,
            thread_turns: 0,
            last: None,
            crisis_open: false,
            crisis_resources: Vec::new(),
            crisis_plan: Vec::new(),
            pending: None,
        };
        // A thread continued with its crisis episode open shows the panel
        // from the start.
        session.refresh_crisis(false).await;
        Ok(session)
    }

    /// The service.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// The settings the session started with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Stops the host gracefully (a crisis turn always finishes).
    pub async fn shutdown(&mut self) {
        if let Some(host) = self.host.take() {
            host.shutdown().await;
        }
    }

    fn caller(&self) -> Caller {
        Caller::local(self.user.clone())
    }

    /// The owner of this session's memory: the user, else the thread.
    pub fn owner(&self) -> String {
        self.user
            .clone()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| self.thread.clone())
    }

    /// The model that writes replies in this session.
    pub fn model(&self) -> String {
        if self.service.mode() == RuntimeMode::Deterministic {
            return "none (deterministic)".to_owned();
        }
        match self.tier {
            ModelTier::Quality => self.settings.quality_model.clone(),
            _ => self.settings.fast_model.clone(),
        }
    }

    /// Whether a question is open (the next line answers it).
    pub fn asking(&self) -> bool {
        self.pending.is_some()
    }

    /// The request of a message on the current thread.
    pub fn request(&self, message: String) -> TurnRequest {
        let mut req = TurnRequest::new(self.caller(), self.thread.clone(), message, Channel::Test)
            .in_mode(self.memory_mode);
        req.response_model_tier = Some(self.tier);
        req
    }

    /// Takes note of a finished turn (diagnostics, crisis panel) and says
    /// what to print after it (trace, verbose line), if anything.
    pub async fn finished(&mut self, output: &AgentOutput) -> Option<String> {
        self.turns += 1;
        self.thread_turns += 1;
        if output.response_type == ResponseType::Crisis && !output.resources.is_empty() {
            self.crisis_resources.clone_from(&output.resources);
        }
        self.refresh_crisis(output.response_type == ResponseType::Crisis)
            .await;
        self.last = Some(Box::new(output.clone()));
        let mut extra = Vec::new();
        if self.verbose {
            extra.push(diag::verbose_line(output));
        }
        if self.trace != Trace::Off {
            extra.push(diag::lines(output).join("\n"));
            if self.trace == Trace::Once {
                self.trace = Trace::Off;
            }
        }
        (!extra.is_empty()).then(|| extra.join("\n"))
    }

    /// Whose safety plan this terminal reads: the user, else the thread
    /// (the memory owner of a local caller).
    fn plan_owner(&self) -> String {
        self.user
            .clone()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| self.thread.clone())
    }

    /// Reads whether the current thread's crisis episode is open (`open`
    /// when the thread cannot be read) and, while it is, what the crisis
    /// panel shows: the verified lines (the directory's when no crisis
    /// reply of this run gave them) and the person's own safety plan
    /// (persistent memory only). No model, nothing written.
    pub async fn refresh_crisis(&mut self, open: bool) {
        self.crisis_open = self.episode_open().await.unwrap_or(open);
        if !self.crisis_open {
            self.crisis_plan.clear();
            return;
        }
        let owner = (self.memory_mode == MemoryMode::Persistent).then(|| self.plan_owner());
        let sos = self.service.sos(owner.as_deref(), None).await;
        if self.crisis_resources.is_empty() {
            self.crisis_resources = sos.resources;
        }
        self.crisis_plan = sos.plan.as_ref().map(plan_lines).unwrap_or_default();
    }

    /// Whether the current thread's crisis episode is open.
    async fn episode_open(&self) -> Option<bool> {
        let state = self
            .service
            .thread(&self.caller(), self.memory_mode, &self.thread)
            .await
            .ok()??;
        Some(state.crisis_episode.is_some())
    }

    /// Reads one typed line.
    pub async fn input(&mut self, line: &str) -> Outcome {
        if let Some(pending) = self.pending.take() {
            return Outcome::Reply(self.answer(pending, line.trim()).await);
        }
        match commands::parse(line) {
            Input::Empty => Outcome::Reply(Reply::ok("", "", Value::Null)),
            Input::Message(m) => Outcome::Send(m),
            Input::Unknown { name, suggestion } => {
                let text = match suggestion {
                    Some(s) => {
                        format!("Unknown command /{name}. Did you mean /{s}? (/help lists them)")
                    }
                    None => format!("Unknown command /{name}. Type /help for the list."),
                };
                let mut r = Reply::fail("unknown", text);
                r.data = json!({"typed": name, "suggestion": suggestion});
                Outcome::Reply(r)
            }
            // `/plan` and `/plan build` are turns: the safety plan's flow
            // runs in the conversation (after the crisis gate, like any
            // message).
            Input::Command { name: "plan", args } if args.is_empty() => {
                Outcome::Send("/plan".to_owned())
            }
            Input::Command { name: "plan", args } if args.len() == 1 && args[0] == "build" => {
                Outcome::Send("help me make a safety plan".to_owned())
            }
            Input::Command { name, args } => {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                Outcome::Reply(self.command(name, &args).await)
            }
        }
    }

    /// What leaving now should do: ask for feedback after a conversation
    /// (like `/exit`), else nothing.
    pub fn exit_question(&mut self) -> Option<Reply> {
        if self.thread_turns == 0 {
            return None;
        }
        let prompt = feedback_prompt();
        self.pending = Some(Pending::EndFeedback {
            via: EndedVia::TerminalExit,
            then: AfterEnd::Exit,
            next_thread: None,
        });
        Some(Reply::ok("exit", "", Value::Null).with(Effect::Ask(prompt)))
    }

    /// The end of input with a question open: leave without an answer.
    pub fn drop_question(&mut self) {
        self.pending = None;
    }

    async fn command(&mut self, name: &'static str, args: &[&str]) -> Reply {
        match self.run(name, args).await {
            Ok(r) => r,
            Err(e) => Reply::fail(name, e.to_string()),
        }
    }

    async fn run(&mut self, name: &'static str, args: &[&str]) -> Result<Reply, ServiceError> {
        Ok(match (name, args) {
            ("help", []) => Reply::ok("help", commands::help_text(), Value::Null),
            ("help", [cmd, ..]) => match commands::find(cmd.trim_start_matches('/')) {
                Some(spec) => Reply::ok("help", commands::help_of(spec), Value::Null),
                None => Reply::fail("help", format!("No command /{cmd}.")),
            },
            ("keys", _) => Reply::ok("keys", commands::KEYS, Value::Null),
            ("status", _) => self.status().await,
            ("history", args) => {
                let n = match args.first().map(|a| a.parse::<usize>()) {
                    None => 6,
                    Some(Ok(n)) if n > 0 => n.min(200),
                    Some(_) => return Ok(usage("history")),
                };
                self.history(n).await?
            }
            ("context", _) => self.context().await?,
            ("search", [scope, words @ ..]) if !words.is_empty() => {
                let scope = *scope;
                if !matches!(scope, "history" | "memory" | "all") {
                    return Ok(usage("search"));
                }
                self.search(scope, &words.join(" ")).await?
            }
            ("search", _) => usage("search"),
            ("summary", args) => {
                let full = match args.first() {
                    None | Some(&"short") => false,
                    Some(&"full") => true,
                    Some(_) => return Ok(usage("summary")),
                };
                self.summary(full).await?
            }
            ("export", [fmt, rest @ ..]) if rest.len() <= 1 => {
                let Some(format) = export::Format::parse(fmt) else {
                    return Ok(usage("export"));
                };
                self.export(format, rest.first().map(PathBuf::from)).await?
            }
            ("export", _) => usage("export"),
            ("reset", _) => {
                let outcome = self.end(None, EndedVia::Terminal).await?;
                self.thread_turns = 0;
                // Ending a session does not close a crisis episode: the
                // panel stays while the thread's episode is open.
                self.refresh_crisis(false).await;
                Reply::ok(
                    "reset",
                    format!(
                        "{} A fresh session starts with your next message.",
                        outcome.detail
                    ),
                    json!({"finalized": outcome.finalized}),
                )
                .with(Effect::Clear)
            }
            ("clear", _) => Reply::ok("clear", "", Value::Null).with(Effect::Clear),
            ("end", args) => {
                let (then, next_thread) = match args {
                    [] => (AfterEnd::Stay, None),
                    ["new"] => (AfterEnd::NewThread, None),
                    ["new", id] => (AfterEnd::NewThread, Some((*id).to_owned())),
                    _ => return Ok(usage("end")),
                };
                if let Some(id) = &next_thread
                    && let Err(why) = check_thread(id)
                {
                    return Ok(Reply::fail("end", why));
                }
                self.pending = Some(Pending::EndFeedback {
                    via: EndedVia::Terminal,
                    then,
                    next_thread,
                });
                Reply::ok("end", "", Value::Null).with(Effect::Ask(feedback_prompt()))
            }
            ("exit" | "quit", _) => match self.exit_question() {
                Some(r) => r,
                None => Reply::ok(name, farewell(self.memory_mode), Value::Null).with(Effect::Exit),
            },
            ("ui", [mode]) => match *mode {
                "full" => {
                    self.ui = UiMode::Full;
                    Reply::ok("ui", "Diagnostics panel on.", json!({"ui": "full"}))
                }
                "compact" => {
                    self.ui = UiMode::Compact;
                    Reply::ok("ui", "Diagnostics panel off.", json!({"ui": "compact"}))
                }
                _ => usage("ui"),
            },
            ("ui", _) => usage("ui"),
            ("theme", [name]) => match ThemeName::parse(name) {
                Some(t) => {
                    self.theme = t;
                    Reply::ok(
                        "theme",
                        format!("Theme: {}.", t.as_str()),
                        json!({"theme": t.as_str()}),
                    )
                }
                None => usage("theme"),
            },
            ("theme", _) => usage("theme"),
            ("memory", args) => self.memory(args).await?,
            ("threads", args) => {
                let n = match args.first().map(|a| a.parse::<usize>()) {
                    None => 12,
                    Some(Ok(n)) if n > 0 => n.min(100),
                    Some(_) => return Ok(usage("threads")),
                };
                self.threads(n).await?
            }
            ("resume", [id]) => self.resume(id).await?,
            ("resume", _) => usage("resume"),
            ("new", args) if args.len() <= 1 => {
                let id = args
                    .first()
                    .map(|s| (*s).to_owned())
                    .unwrap_or_else(new_thread_id);
                if let Err(why) = check_thread(&id) {
                    return Ok(Reply::fail("new", why));
                }
                self.switch(id.clone());
                Reply::ok("new", format!("New thread {id}."), json!({"thread": id}))
                    .with(Effect::Switched(Vec::new()))
            }
            ("new", _) => usage("new"),
            ("mode", []) => Reply::ok(
                "mode",
                format!(
                    "Mode: {} (effective: {}). Use /mode deterministic|hybrid|auto.",
                    self.settings.mode,
                    self.service.mode()
                ),
                json!({"mode": self.settings.mode.to_string(), "effective": self.service.mode().to_string()}),
            ),
            ("mode", [m]) => match m.parse::<RuntimeMode>() {
                Ok(mode) => self.set_mode(mode).await?,
                Err(_) => usage("mode"),
            },
            ("response-tier", []) => Reply::ok(
                "response-tier",
                format!("Response tier: {}.", self.tier),
                json!({"tier": self.tier.to_string()}),
            ),
            ("response-tier", [t]) => match *t {
                "fast" | "quality" => {
                    self.tier = if *t == "fast" {
                        ModelTier::Fast
                    } else {
                        ModelTier::Quality
                    };
                    Reply::ok(
                        "response-tier",
                        format!("Response tier: {t} (model {}).", self.model()),
                        json!({"tier": t}),
                    )
                }
                _ => usage("response-tier"),
            },
            ("verbosity", []) => Reply::ok(
                "verbosity",
                format!(
                    "Verbosity: {}.",
                    if self.verbose { "verbose" } else { "compact" }
                ),
                json!({"verbosity": if self.verbose { "verbose" } else { "compact" }}),
            ),
            ("verbosity", [v @ ("compact" | "verbose")]) => {
                self.verbose = *v == "verbose";
                Reply::ok(
                    "verbosity",
                    format!("Verbosity: {v}."),
                    json!({"verbosity": v}),
                )
            }
            ("trace", [t]) => {
                self.trace = match *t {
                    "on" => Trace::On,
                    "off" => Trace::Off,
                    "once" => Trace::Once,
                    _ => return Ok(usage("trace")),
                };
                Reply::ok("trace", format!("Trace: {t}."), json!({"trace": t}))
            }
            ("exercises", _) => {
                let list: Vec<Value> = self
                    .service
                    .exercises()
                    .iter()
                    .map(|e| json!({"id": e.id, "name": e.display_name}))
                    .collect();
                let mut text = String::from("Guided exercises (ask for one by name to start it):");
                for e in self.service.exercises() {
                    text.push_str(&format!("\n  {}  ({})", e.display_name, e.id));
                }
                Reply::ok("exercises", text, json!({"exercises": list}))
            }
            ("forget-me", _) => self.forget_me().await?,
            ("sos", args) if args.len() <= 1 => {
                let country = args.first().copied();
                if country
                    .is_some_and(|c| c.len() != 2 || !c.chars().all(|ch| ch.is_ascii_alphabetic()))
                {
                    return Ok(usage("sos"));
                }
                let owner = self.plan_owner();
                let sos = self.service.sos(Some(&owner), country).await;
                let data = serde_json::to_value(&sos).unwrap_or(Value::Null);
                Reply::ok("sos", sos.text, data)
            }
            ("plan", ["delete"]) => {
                let owner = self.plan_owner();
                let text = if self.service.delete_safety_plan(&owner).await? {
                    "Your safety plan is deleted."
                } else {
                    "You have no safety plan to delete."
                };
                Reply::ok("plan", text, Value::Null)
            }
            ("doctor", args) => {
                let verbose = args.first() == Some(&"verbose");
                let report =
                    crate::doctor::check(&self.settings, &self.provenance, &self.service).await;
                Reply::ok("doctor", report.text(verbose), report.to_json())
            }
            _ => usage(name),
        })
    }

    async fn status(&self) -> Reply {
        let owner = match &self.user {
            Some(u) => u.clone(),
            None => format!("{} (thread-scoped)", self.thread),
        };
        let semantic = match self.service.semantic_status() {
            Some(SemanticStatus::On) => " + semantic signal".to_owned(),
            Some(SemanticStatus::Failed(why)) => format!("; semantic signal off ({why})"),
            Some(SemanticStatus::Off) | None => "; semantic signal off".to_owned(),
        };
        let rows = [
            ("thread", self.thread.clone()),
            ("owner", owner),
            ("memory", self.memory_mode.to_string()),
            (
                "storage",
                self.service.storage_label(self.memory_mode).to_owned(),
            ),
            (
                "mode",
                format!(
                    "{} (effective: {})",
                    self.settings.mode,
                    self.service.mode()
                ),
            ),
            ("tier", format!("{} ({})", self.tier, self.model())),
            (
                "crisis gate",
                format!(
                    "deterministic layers{semantic}{}",
                    if self.service.mode() == RuntimeMode::Hybrid {
                        " + model"
                    } else {
                        ""
                    }
                ),
            ),
            ("trace export", self.service.trace_export().describe()),
            (
                "trace",
                match self.trace {
                    Trace::On => "on",
                    Trace::Off => "off",
                    Trace::Once => "once",
                }
                .to_owned(),
            ),
            (
                "ui",
                if self.ui == UiMode::Full {
                    "full"
                } else {
                    "compact"
                }
                .to_owned(),
            ),
            (
                "verbosity",
                if self.verbose { "verbose" } else { "compact" }.to_owned(),
            ),
            ("theme", self.theme.as_str().to_owned()),
            ("turns", format!("{} this run", self.turns)),
            (
                "crisis",
                if self.crisis_open {
                    "episode open"
                } else {
                    "none"
                }
                .to_owned(),
            ),
        ];
        let text = rows
            .iter()
            .map(|(k, v)| format!("{k:<12} {v}"))
            .collect::<Vec<_>>()
            .join("\n");
        let data: serde_json::Map<String, Value> = rows
            .iter()
            .map(|(k, v)| (k.replace(' ', "_"), Value::from(v.clone())))
            .collect();
        Reply::ok("status", text, Value::Object(data))
    }

    /// The last `n` messages of the current thread (none in incognito or
    /// on a new thread).
    async fn recent(&self, n: usize) -> Result<Vec<HistoryEntry>, ServiceError> {
        if self.memory_mode == MemoryMode::Incognito {
            return Ok(Vec::new());
        }
        match self
            .service
            .history(&self.caller(), &self.thread, n, None)
            .await
        {
            Ok(h) => Ok(h),
            Err(e) if e.code() == opencouch_runtime::service::ErrorCode::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    async fn history(&self, n: usize) -> Result<Reply, ServiceError> {
        if self.memory_mode == MemoryMode::Incognito {
            return Ok(Reply::ok(
                "history",
                "Incognito keeps no history: nothing of this conversation is stored.",
                json!({"messages": []}),
            ));
        }
        let entries = self.recent(n).await?;
        if entries.is_empty() {
            return Ok(Reply::ok(
                "history",
                "No messages on this thread yet.",
                json!({"messages": []}),
            ));
        }
        let text = entries
            .iter()
            .map(|e| {
                format!(
                    "{:>4} {}: {}",
                    e.index,
                    who(e.message.role),
                    e.message.content
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        let data = json!({"messages": entries.iter().map(|e| json!({
            "index": e.index, "role": who(e.message.role), "content": e.message.content,
        })).collect::<Vec<_>>()});
        Ok(Reply::ok("history", text, data))
    }

    async fn context(&self) -> Result<Reply, ServiceError> {
        let state = self
            .service
            .thread(&self.caller(), self.memory_mode, &self.thread)
            .await?;
        let Some(state) = state else {
            return Ok(Reply::ok(
                "context",
                format!("Thread {} has no conversation yet.", self.thread),
                json!({"thread": self.thread, "exists": false}),
            ));
        };
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
        let rows = vec![
            ("thread", self.thread.clone()),
            ("turns", state.turn_count.to_string()),
            ("messages", state.message_count.to_string()),
            ("route", opt(state.route.map(|r| r.to_string()))),
            ("style", opt(state.response_style.map(|r| r.to_string()))),
            (
                "approach",
                opt(state.therapeutic_approach.map(|r| r.to_string())),
            ),
            (
                "exercise",
                opt(state
                    .exercise_state
                    .as_ref()
                    .map(|e| e.exercise_type.clone())),
            ),
            (
                "crisis level",
                opt(state.crisis.as_ref().map(|c| c.level.get().to_string())),
            ),
            (
                "crisis",
                if state.crisis_episode.is_some() {
                    "episode open".to_owned()
                } else {
                    "no open episode".to_owned()
                },
            ),
        ];
        let text = rows
            .iter()
            .map(|(k, v)| format!("{k:<12} {v}"))
            .collect::<Vec<_>>()
            .join("\n");
        let data: serde_json::Map<String, Value> = rows
            .iter()
            .map(|(k, v)| (k.replace(' ', "_"), Value::from(v.clone())))
            .collect();
        Ok(Reply::ok("context", text, Value::Object(data)))
    }

    async fn search(&self, scope: &str, query: &str) -> Result<Reply, ServiceError> {
        let needle = query.to_lowercase();
        let mut hits: Vec<Value> = Vec::new();
        let mut text = Vec::new();
        if scope != "memory" {
            for e in self.recent(1000).await? {
                if e.message.content.to_lowercase().contains(&needle) {
                    text.push(format!(
                        "history {:>4} {}: {}",
                        e.index,
                        who(e.message.role),
                        e.message.content
                    ));
                    hits.push(json!({"source": "history", "index": e.index,
                        "role": who(e.message.role), "content": e.message.content}));
                }
            }
        }
        if scope != "history" && self.memory_mode == MemoryMode::Persistent {
            let items = self.service.memory_items(&self.owner()).await?;
            for (kind, list) in [
                ("fact", &items.facts),
                ("session", &items.sessions),
                ("rule", &items.rules),
            ] {
                for (i, item) in list.iter().enumerate() {
                    if item.to_lowercase().contains(&needle) {
                        text.push(format!("memory {kind} {}: {item}", i + 1));
                        hits.push(json!({"source": "memory", "kind": kind, "index": i + 1, "content": item}));
                    }
                }
            }
        }
        let head = format!("{} match(es) for \"{query}\" in {scope}.", hits.len());
        let body = if text.is_empty() {
            head
        } else {
            format!("{head}\n{}", text.join("\n"))
        };
        Ok(Reply::ok(
            "search",
            body,
            json!({"scope": scope, "query": query, "hits": hits}),
        ))
    }

    async fn summary(&self, full: bool) -> Result<Reply, ServiceError> {
        let entries = self.recent(if full { 1000 } else { 200 }).await?;
        let mine = entries
            .iter()
            .filter(|e| e.message.role == Role::User)
            .count();
        let mut lines = vec![format!(
            "Thread {}: {} messages ({} from you) this far.",
            self.thread,
            entries.len(),
            mine
        )];
        if let Some(first) = entries.iter().find(|e| e.message.role == Role::User) {
            lines.push(format!(
                "It began with: {}",
                first_words(&first.message.content, 80)
            ));
        }
        let mut sessions = Vec::new();
        if self.memory_mode == MemoryMode::Persistent {
            sessions = self.service.memory_items(&self.owner()).await?.sessions;
        }
        let shown: Vec<&String> = if full {
            sessions.iter().collect()
        } else {
            sessions.iter().rev().take(1).collect()
        };
        if shown.is_empty() {
            lines.push(
                "No session summary yet: one is written when a session ends (/end).".to_owned(),
            );
        } else {
            lines.push(
                if full {
                    "Session summaries:"
                } else {
                    "Last session:"
                }
                .to_owned(),
            );
            for s in &shown {
                lines.push(format!("  {s}"));
            }
        }
        Ok(Reply::ok(
            "summary",
            lines.join("\n"),
            json!({"thread": self.thread, "messages": entries.len(), "from_you": mine, "sessions": shown}),
        ))
    }

    async fn export(
        &self,
        format: export::Format,
        file: Option<PathBuf>,
    ) -> Result<Reply, ServiceError> {
        if self.memory_mode == MemoryMode::Incognito {
            return Ok(Reply::fail(
                "export",
                "Incognito keeps nothing, so there is nothing to export.",
            ));
        }
        let entries = self.recent(100_000).await?;
        if entries.is_empty() {
            return Ok(Reply::fail("export", "No messages on this thread yet."));
        }
        let now = Utc::now();
        let path = file.unwrap_or_else(|| export::default_path(&self.thread, format, now));
        let body = export::render(&self.thread, &entries, format, now);
        Ok(match export::write_private(&path, &body) {
            Ok(()) => Reply::ok(
                "export",
                format!(
                    "Wrote {} messages to {} (private to you).",
                    entries.len(),
                    path.display()
                ),
                json!({"path": path.display().to_string(), "messages": entries.len(), "format": format.extension()}),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Reply::fail(
                "export",
                format!("{} exists; choose another file name.", path.display()),
            ),
            Err(e) => Reply::fail("export", format!("Could not write {}: {e}", path.display())),
        })
    }

    async fn memory(&mut self, args: &[&str]) -> Result<Reply, ServiceError> {
        let owner = self.owner();
        let incognito = self.memory_mode == MemoryMode::Incognito;
        let kind_of = |w: &str| match w {
            "fact" | "facts" => Some(ItemKind::Fact),
            "session" | "sessions" => Some(ItemKind::Session),
            "rule" | "rules" => Some(ItemKind::Rule),
            _ => None,
        };
        Ok(match args {
            [] | ["status"] => {
                let text = self
                    .service
                    .memory_status_reply(&owner, self.memory_mode)
                    .await?;
                Reply::ok("memory", text, json!({"owner": owner}))
            }
            ["list", ..] if incognito => Reply::ok("memory", GUEST_MODE_REPLY, Value::Null),
            ["list", which @ ..] => {
                let items = self.service.memory_items(&owner).await?;
                let mut text = format!(
                    "Memory for {owner} (proactive recall {})",
                    if items.proactive_recall { "on" } else { "off" }
                );
                for (title, key, list) in [
                    ("Facts", "facts", &items.facts),
                    ("Sessions", "sessions", &items.sessions),
                    ("Rules", "rules", &items.rules),
                ] {
                    if which.first().is_some_and(|w| kind_of(w) != kind_of(key)) {
                        continue;
                    }
                    text.push_str(&format!("\n{title}:"));
                    if list.is_empty() {
                        text.push_str(" none");
                    }
                    for (i, item) in list.iter().enumerate() {
                        text.push_str(&format!("\n  {}. {item}", i + 1));
                    }
                }
                Reply::ok(
                    "memory",
                    text,
                    json!({"facts": items.facts, "sessions": items.sessions, "rules": items.rules,
                        "proactive_recall": items.proactive_recall}),
                )
            }
            ["recall", v @ ("on" | "off")] => {
                let change = self.service.set_recall(&owner, *v == "on").await?;
                Reply::ok("memory", change.reply, json!({"changed": change.changed}))
            }
            ["forget", kind, n] => {
                let (Some(kind), Ok(index)) = (kind_of(kind), n.parse::<usize>()) else {
                    return Ok(usage("memory"));
                };
                let prepared = self.service.forget_prepare(&owner, kind, index).await?;
                match prepared.pending {
                    Some(pending) => {
                        self.pending = Some(Pending::ForgetItem { owner, pending });
                        Reply::ok("memory", prepared.reply, Value::Null)
                            .with(Effect::Ask("Delete it? [y/N]".to_owned()))
                    }
                    None => Reply::ok("memory", prepared.reply, Value::Null),
                }
            }
            ["clear", kind] => {
                let kinds: &'static [ItemKind] = match *kind {
                    "facts" => &[ItemKind::Fact],
                    "sessions" => &[ItemKind::Session],
                    "rules" => &[ItemKind::Rule],
                    "all" => &[ItemKind::Fact, ItemKind::Session, ItemKind::Rule],
                    _ => return Ok(usage("memory")),
                };
                if incognito {
                    return Ok(Reply::ok("memory", GUEST_MODE_REPLY, Value::Null));
                }
                self.pending = Some(Pending::ClearMemory {
                    owner,
                    kinds,
                    what: (*kind).to_owned(),
                });
                Reply::ok("memory", "", Value::Null).with(Effect::Ask(format!(
                    "Type CLEAR to delete {kind} permanently"
                )))
            }
            _ => usage("memory"),
        })
    }

    async fn threads(&self, n: usize) -> Result<Reply, ServiceError> {
        let list = self.service.threads(&self.caller(), n, None).await?;
        if list.threads.is_empty() {
            return Ok(Reply::ok(
                "threads",
                "No saved threads yet.",
                json!({"threads": []}),
            ));
        }
        let text = list
            .threads
            .iter()
            .map(|t| {
                format!(
                    "{} {}  {} turns  {}",
                    if t.thread_id == self.thread { "*" } else { " " },
                    t.thread_id,
                    t.turn_count,
                    t.updated_at.format("%Y-%m-%d %H:%M")
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        Ok(Reply::ok(
            "threads",
            format!("{text}\nContinue one with /resume ID."),
            json!({"threads": list.threads}),
        ))
    }

    async fn resume(&mut self, id: &str) -> Result<Reply, ServiceError> {
        if let Err(why) = check_thread(id) {
            return Ok(Reply::fail("resume", why));
        }
        let found = self
            .service
            .thread(&self.caller(), self.memory_mode, id)
            .await?;
        if found.is_none() {
            return Ok(Reply::fail(
                "resume",
                format!("No thread {id}. /threads lists yours; /new {id} starts it."),
            ));
        }
        self.switch(id.to_owned());
        self.refresh_crisis(false).await;
        let recent: Vec<(Role, String)> = self
            .recent(20)
            .await?
            .into_iter()
            .map(|e| (e.message.role, e.message.content))
            .collect();
        Ok(Reply::ok(
            "resume",
            format!("Continuing thread {id} ({} recent messages).", recent.len()),
            json!({"thread": id}),
        )
        .with(Effect::Switched(recent)))
    }

    fn switch(&mut self, id: String) {
        self.thread = id;
        self.thread_turns = 0;
        self.crisis_open = false;
        self.crisis_resources.clear();
        self.crisis_plan.clear();
        self.last = None;
    }

    async fn set_mode(&mut self, mode: RuntimeMode) -> Result<Reply, ServiceError> {
        let mut settings = self.settings.clone();
        settings.mode = mode;
        let host = Host::start_with(&settings, self.start).await?;
        if let Some(old) = self.host.replace(host) {
            old.shutdown().await;
        }
        if let Some(host) = &self.host {
            self.service = host.service();
        }
        self.settings = settings;
        Ok(Reply::ok(
            "mode",
            format!("Mode: {mode} (effective: {}).", self.service.mode()),
            json!({"mode": mode.to_string(), "effective": self.service.mode().to_string()}),
        ))
    }

    async fn forget_me(&mut self) -> Result<Reply, ServiceError> {
        if self.memory_mode == MemoryMode::Incognito {
            return Ok(Reply::ok(
                "forget-me",
                "Incognito keeps nothing, so there is nothing to delete.",
                Value::Null,
            ));
        }
        let owner = self.owner();
        let plan = self
            .service
            .forget_me_prepare(&ForgetMeRequest {
                owner: owner.clone(),
            })
            .await?;
        match plan.token {
            Some(token) => {
                self.pending = Some(Pending::ForgetMe { owner, token });
                Ok(
                    Reply::ok("forget-me", plan.message, Value::Null).with(Effect::Ask(
                        "Type FORGET to delete all of it permanently".to_owned(),
                    )),
                )
            }
            None => Ok(Reply::ok("forget-me", plan.message, Value::Null)),
        }
    }

    async fn end(
        &self,
        feedback: Option<Feedback>,
        via: EndedVia,
    ) -> Result<EndSessionOutcome, ServiceError> {
        self.service
            .end_session(
                &self.caller(),
                &self.thread,
                self.memory_mode,
                feedback,
                via,
            )
            .await
    }

    async fn answer(&mut self, pending: Pending, answer: &str) -> Reply {
        match self.answer_inner(pending, answer).await {
            Ok(r) => r,
            Err(e) => Reply::fail("answer", e.to_string()),
        }
    }

    async fn answer_inner(
        &mut self,
        pending: Pending,
        answer: &str,
    ) -> Result<Reply, ServiceError> {
        Ok(match pending {
            Pending::EndFeedback {
                via,
                then,
                next_thread,
            } => {
                let feedback = parse_feedback(answer);
                let name = if via == EndedVia::TerminalExit {
                    "exit"
                } else {
                    "end"
                };
                let outcome = self.end(Some(feedback), via).await?;
                self.thread_turns = 0;
                self.refresh_crisis(false).await;
                let mut text = end_text(&outcome);
                let mut data = json!({
                    "finalized": outcome.finalized,
                    "feedback": feedback,
                    "feedback_recorded": outcome.feedback_recorded,
                    "summary": outcome.summary.as_ref().map(|s| json!({"summary": s.summary, "themes": s.themes})),
                });
                let effect = match then {
                    AfterEnd::Stay => Effect::None,
                    AfterEnd::Exit => {
                        text.push('\n');
                        text.push_str(farewell(self.memory_mode));
                        Effect::Exit
                    }
                    AfterEnd::NewThread => {
                        let id = next_thread.unwrap_or_else(new_thread_id);
                        self.switch(id.clone());
                        text.push_str(&format!("\nNew thread {id}."));
                        data["thread"] = Value::from(id);
                        Effect::Switched(Vec::new())
                    }
                };
                Reply::ok(name, text, data).with(effect)
            }
            Pending::ForgetItem { owner, pending } => {
                let yes = matches!(answer.to_lowercase().as_str(), "y" | "yes");
                let done = if yes {
                    self.service.forget_confirm(&owner, &pending).await?
                } else {
                    self.service.forget_cancel(&owner, &pending).await?
                };
                Reply::ok("memory", done.reply, json!({"changed": done.changed}))
            }
            Pending::ClearMemory { owner, kinds, what } => {
                if answer == "CLEAR" {
                    let n = self.service.memory_clear(&owner, kinds).await?;
                    Reply::ok(
                        "memory",
                        format!("Deleted {n} items ({what})."),
                        json!({"deleted": n}),
                    )
                } else {
                    Reply::ok("memory", "Nothing deleted.", json!({"deleted": 0}))
                }
            }
            Pending::ForgetMe { owner, token } => {
                if answer == "FORGET" {
                    let done = self
                        .service
                        .forget_me_confirm(&ForgetMeConfirm { owner, token })
                        .await?;
                    self.thread_turns = 0;
                    self.refresh_crisis(false).await;
                    Reply::ok(
                        "forget-me",
                        done.message,
                        json!({"deleted": done.counts.deleted()}),
                    )
                } else {
                    Reply::ok("forget-me", "Nothing deleted.", json!({"deleted": 0}))
                }
            }
        })
    }
}

/// The person's safety plan as the crisis panel shows it: a heading, then
/// one line per section that helps in the moment (their coping steps, the
/// people and places, whom to call, what makes things safer, their reasons),
/// their own numbers marked as theirs, never as verified lines.
pub fn plan_lines(plan: &opencouch_core::SafetyPlan) -> Vec<String> {
    if plan.is_empty() {
        return Vec::new();
    }
    let mut lines = vec!["Your own safety plan:".to_owned()];
    lines.extend(
        opencouch_runtime::service::crisis_plan_sections(plan)
            .into_iter()
            .map(|(section, shown)| format!("{}: {}", section.title(), shown.join("; "))),
    );
    lines
}

fn usage(name: &str) -> Reply {
    let text = match commands::find(name) {
        Some(spec) => format!("Usage: {}", commands::help_of(spec)),
        None => "Type /help for the list.".to_owned(),
    };
    Reply::fail(name, text)
}

fn who(role: Role) -> &'static str {
    match role {
        Role::User => "you",
        Role::Assistant => "opencouch",
        Role::System => "system",
    }
}

fn check_thread(id: &str) -> Result<(), String> {
    if opencouch_runtime::service::valid_thread_id(id) {
        Ok(())
    } else {
        Err(format!(
            "That thread id is not allowed: {}.",
            opencouch_runtime::service::THREAD_ID_RULE
        ))
    }
}

fn new_thread_id() -> String {
    format!("cli:{}", Utc::now().format("%Y%m%d-%H%M%S"))
}

fn first_words(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max).collect();
    format!("{}…", cut.trim_end())
}

/// The feedback question of `/end` and `/exit`.
pub fn feedback_prompt() -> String {
    "Was this session helpful? [y]es / [n]o / [s]kip".to_owned()
}

fn parse_feedback(answer: &str) -> Feedback {
    match answer.to_ascii_lowercase().as_str() {
        "y" | "yes" | "+" | "👍" => Feedback::Positive,
        "n" | "no" | "-" | "👎" => Feedback::Negative,
        _ => Feedback::Skip,
    }
}

fn end_text(outcome: &EndSessionOutcome) -> String {
    let mut text = match &outcome.summary {
        Some(arc) => {
            let mut s = format!("Session summary: {}", arc.summary);
            if !arc.themes.is_empty() {
                s.push_str(&format!("\nThemes: {}", arc.themes.join(", ")));
            }
            s
        }
        None => outcome.detail.clone(),
    };
    if outcome.feedback_recorded {
        text.push_str("\nThank you for the feedback.");
    }
    text
}

/// The last words of a run.
pub fn farewell(mode: MemoryMode) -> &'static str {
    if mode == MemoryMode::Persistent {
        "Take care. Your conversation is saved; continue it with the same --thread."
    } else {
        "Take care. Your conversation is not saved."
    }
}
