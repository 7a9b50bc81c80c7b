//! In-process backend: incognito sessions and tests. Nothing survives the
//! process. Same contract as the durable backends.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};

use crate::error::{StoreError, StoreResult};
use crate::records::{
    CommitOutcome, CrisisRecord, DailyCrisisCount, FeedbackRecord, MemoryKind, MemoryRecord,
    OwnerCounts, SessionWrite, ThreadCursor, ThreadPage, ThreadSnapshot, ThreadSummary,
    TranscriptEntry, TurnCommit, TurnLoad, VoiceFinalization, thread_belongs_to, thread_owner,
};
use crate::session::ActiveSession;
use crate::traits::{
    CrisisLog, FeedbackStore, MemoryStore, OwnerStore, SessionStore, ThreadStore,
    VoiceFinalizationStore,
};

#[derive(Default)]
struct ThreadData {
    state: Option<(opencouch_core::ThreadState, DateTime<Utc>)>,
    transcript: Vec<opencouch_core::Message>,
}

/// The in-memory backend's channel tables.
#[derive(Default)]
pub(crate) struct ChannelMaps {
    pub(crate) cursors: HashMap<String, i64>,
    pub(crate) chats: BTreeMap<(String, String), crate::records::ChatRecord>,
}

#[derive(Default)]
struct Inner {
    threads: HashMap<String, ThreadData>,
    sessions: BTreeMap<String, ActiveSession>,
    memory: HashMap<(String, MemoryKind), Vec<MemoryRecord>>,
    memory_revisions: HashMap<(String, MemoryKind), u64>,
    /// Where revisions come from: one clock for every namespace, so a
    /// namespace deleted and written again never repeats a revision (as the
    /// SQL backends' `memory_revision_clock`).
    revision_clock: u64,
    crisis: Vec<CrisisRecord>,
    feedback: Vec<FeedbackRecord>,
    voice: HashMap<String, VoiceFinalization>,
    channels: ChannelMaps,
    safety_plans: HashMap<String, crate::records::SafetyPlanRecord>,
}

impl Inner {
    /// The owner's threads ([`thread_belongs_to`]), in byte order.
    fn owner_threads(&self, owner: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .threads
            .iter()
            .filter(|(id, d)| {
                d.state
                    .as_ref()
                    .is_some_and(|(s, _)| thread_belongs_to(id, s.user_id.as_deref(), owner))
            })
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// Rows keyed by thread that belong to the owner: of an owned thread,
    /// or scoped to the owner even without a snapshot.
    fn thread_keyed(owner: &str, owned: &[String], thread_id: &str) -> bool {
        owned.iter().any(|t| t == thread_id)
            || (!owner.contains(':') && thread_owner(thread_id) == owner)
    }

    /// What deleting the owner finds now (`users`: API users of that name).
    fn owner_counts(&self, owner: &str, users: u64) -> OwnerCounts {
        let owned = self.owner_threads(owner);
        let keyed = |t: &str| Self::thread_keyed(owner, &owned, t);
        let memory = |kind| {
            self.memory
                .get(&(owner.to_owned(), kind))
                .map_or(0, |l| l.len() as u64)
        };
        OwnerCounts {
            threads: owned.len() as u64,
            messages: self
                .threads
                .iter()
                .filter(|(id, _)| keyed(id))
                .map(|(_, d)| d.transcript.len() as u64)
                .sum(),
            open_sessions: self.sessions.keys().filter(|t| keyed(t)).count() as u64,
            voice_statuses: self.voice.keys().filter(|t| keyed(t)).count() as u64,
            facts: memory(MemoryKind::Semantic),
            session_summaries: memory(MemoryKind::Episodic),
            preferences: memory(MemoryKind::Procedural),
            memory_revisions: self
                .memory_revisions
                .keys()
                .filter(|(o, _)| o == owner)
                .count() as u64,
            feedback: self
                .feedback
                .iter()
                .filter(|f| f.user_id_or_null.as_deref() == Some(owner))
                .count() as u64,
            api_users: users,
            channel_chats: self
                .channels
                .chats
                .values()
                .filter(|c| c.owner_id == owner)
                .count() as u64,
            safety_plans: u64::from(self.safety_plans.contains_key(owner)),
            crisis_log_unlinked: self
                .crisis
                .iter()
                .filter(|c| c.user_id_or_null.as_deref() == Some(owner))
                .count() as u64,
        }
    }

    fn bump_revision(&mut self, owner_id: &str, kind: MemoryKind) {
        self.revision_clock += 1;
        self.memory_revisions
            .insert((owner_id.to_owned(), kind), self.revision_clock);
    }
}

/// The in-memory backend (implements every store trait).
#[derive(Default)]
pub struct MemoryBackend {
    inner: Mutex<Inner>,
    users: Mutex<Vec<crate::records::ApiUser>>,
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied write
        // (every write below completes before returning), so recover.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the channel tables (see `channels.rs`).
    pub(crate) fn with_channels<R>(&self, f: impl FnOnce(&mut ChannelMaps) -> R) -> R {
        f(&mut self.lock().channels)
    }

    /// Runs `f` on the safety plans (see `safety_plans.rs`).
    pub(crate) fn with_safety_plans<R>(
        &self,
        f: impl FnOnce(&mut HashMap<String, crate::records::SafetyPlanRecord>) -> R,
    ) -> R {
        f(&mut self.lock().safety_plans)
    }

    /// The API users (see `users.rs`).
    pub(crate) fn users(&self) -> MutexGuard<'_, Vec<crate::records::ApiUser>> {
        self.users
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn entries(transcript: &[opencouch_core::Message], start: usize) -> Vec<TranscriptEntry> {
    transcript[start..]
        .iter()
        .enumerate()
        .map(|(i, m)| TranscriptEntry {
            index: (start + i) as u64,
            message: m.clone(),
        })
        .collect()
}

/// The thread's snapshot and last `recent` entries (see [`ThreadStore::load`]).
fn snapshot(inner: &Inner, thread_id: &str, recent: usize) -> Option<ThreadSnapshot> {
    let data = inner.threads.get(thread_id)?;
    let (state, _) = data.state.as_ref()?;
    let start = data.transcript.len().saturating_sub(recent);
    Some(ThreadSnapshot {
        state: state.clone(),
        recent: entries(&data.transcript, start),
    })
}

#[async_trait]
impl ThreadStore for MemoryBackend {
    async fn load(&self, thread_id: &str, recent: usize) -> StoreResult<Option<ThreadSnapshot>> {
        Ok(snapshot(&self.lock(), thread_id, recent))
    }

    async fn load_with_session(
        &self,
        thread_id: &str,
        recent: usize,
    ) -> StoreResult<Option<TurnLoad>> {
        let inner = self.lock();
        Ok(Some(TurnLoad {
            snapshot: snapshot(&inner, thread_id, recent),
            session: inner.sessions.get(thread_id).cloned(),
        }))
    }

    async fn commit_turn(&self, commit: TurnCommit) -> StoreResult<CommitOutcome> {
        let TurnCommit {
            mut state,
            append,
            session,
            at,
        } = commit;
        if let SessionWrite::Upsert(s) = &session
            && s.thread_id != state.thread_id
        {
            return Err(StoreError::Invalid("session row belongs to another thread"));
        }
        // Refuse what the durable backends cannot store, so the contract is
        // the same everywhere (and a refused commit writes nothing).
        if i64::try_from(state.turn_count).is_err() {
            return Err(StoreError::Invalid("count exceeds i64"));
        }
        if append.iter().any(|m| m.crisis_level.is_some_and(|l| l > 3)) {
            return Err(StoreError::Invalid("transcript crisis_level must be 0-3"));
        }
        crate::codec::encode_state(&state)?;
        let mut inner = self.lock();
        let thread_id = state.thread_id.clone();
        let data = inner.threads.entry(thread_id.clone()).or_default();
        let first_index = data.transcript.len() as u64;
        data.transcript.extend(append);
        let message_count = data.transcript.len() as u64;
        state.message_count = message_count;
        data.state = Some((state, at));
        match session {
            SessionWrite::Keep => {}
            SessionWrite::Upsert(s) => {
                inner.sessions.insert(thread_id, s);
            }
            SessionWrite::Clear => {
                inner.sessions.remove(&thread_id);
            }
        }
        Ok(CommitOutcome {
            first_index,
            message_count,
        })
    }

    async fn history(
        &self,
        thread_id: &str,
        limit: usize,
        before: Option<u64>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let inner = self.lock();
        let Some(data) = inner.threads.get(thread_id) else {
            return Ok(Vec::new());
        };
        let end = before.map_or(data.transcript.len(), |b| {
            (b as usize).min(data.transcript.len())
        });
        let start = end.saturating_sub(limit);
        Ok(entries(&data.transcript[..end], start))
    }

    async fn list_threads_page(
        &self,
        owner: Option<&str>,
        limit: usize,
        after: Option<&ThreadCursor>,
    ) -> StoreResult<ThreadPage> {
        if limit == 0 {
            return Err(StoreError::Invalid("limit must be at least 1"));
        }
        let inner = self.lock();
        let mut rows: Vec<ThreadSummary> = inner
            .threads
            .iter()
            .filter(|(id, _)| owner.is_none_or(|o| thread_owner(id) == o))
            .filter_map(|(id, d)| {
                d.state.as_ref().map(|(s, at)| ThreadSummary {
                    thread_id: id.clone(),
                    turn_count: s.turn_count,
                    message_count: s.message_count,
                    updated_at: *at,
                })
            })
            .filter(|row| after.is_none_or(|c| c.precedes(row)))
            .collect();
        rows.sort_by(|a, b| {
            b.updated_at
                .cmp(&a.updated_at)
                .then_with(|| a.thread_id.as_bytes().cmp(b.thread_id.as_bytes()))
        });
        rows.truncate(limit.saturating_add(1));
        Ok(ThreadPage::from_rows(rows, limit))
    }

    async fn delete_thread(&self, thread_id: &str) -> StoreResult<bool> {
        let mut inner = self.lock();
        inner.sessions.remove(thread_id);
        Ok(inner
            .threads
            .remove(thread_id)
            .is_some_and(|d| d.state.is_some()))
    }
}

#[async_trait]
impl SessionStore for MemoryBackend {
    async fn get(&self, thread_id: &str) -> StoreResult<Option<ActiveSession>> {
        Ok(self.lock().sessions.get(thread_id).cloned())
    }

    async fn put(&self, session: &ActiveSession) -> StoreResult<()> {
        self.lock()
            .sessions
            .insert(session.thread_id.clone(), session.clone());
        Ok(())
    }

    async fn mark_finalize_required(&self, thread_id: &str, reason: &str) -> StoreResult<bool> {
        let mut inner = self.lock();
        Ok(match inner.sessions.get_mut(thread_id) {
            Some(s) => {
                s.finalize_required_reason = Some(reason.to_owned());
                true
            }
            None => false,
        })
    }

    async fn clear(&self, thread_id: &str) -> StoreResult<bool> {
        Ok(self.lock().sessions.remove(thread_id).is_some())
    }

    async fn list(&self) -> StoreResult<Vec<ActiveSession>> {
        Ok(self.lock().sessions.values().cloned().collect())
    }
}

#[async_trait]
impl MemoryStore for MemoryBackend {
    async fn put(&self, record: &MemoryRecord) -> StoreResult<()> {
        let mut inner = self.lock();
        let list = inner
            .memory
            .entry((record.owner_id.clone(), record.kind))
            .or_default();
        if list.iter().any(|r| r.id == record.id) {
            return Err(StoreError::Conflict {
                what: "memory record",
            });
        }
        list.push(record.clone());
        inner.bump_revision(&record.owner_id, record.kind);
        Ok(())
    }

    async fn get(
        &self,
        owner_id: &str,
        kind: MemoryKind,
        id: &str,
    ) -> StoreResult<Option<MemoryRecord>> {
        let inner = self.lock();
        Ok(inner
            .memory
            .get(&(owner_id.to_owned(), kind))
            .and_then(|l| l.iter().find(|r| r.id == id).cloned()))
    }

    async fn list(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<Vec<MemoryRecord>> {
        Ok(self
            .lock()
            .memory
            .get(&(owner_id.to_owned(), kind))
            .cloned()
            .unwrap_or_default())
    }

    async fn update(&self, record: &MemoryRecord) -> StoreResult<bool> {
        let mut inner = self.lock();
        let Some(list) = inner
            .memory
            .get_mut(&(record.owner_id.clone(), record.kind))
        else {
            return Ok(false);
        };
        match list.iter_mut().find(|r| r.id == record.id) {
            Some(slot) => {
                *slot = record.clone();
                inner.bump_revision(&record.owner_id, record.kind);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn delete(&self, owner_id: &str, kind: MemoryKind, id: &str) -> StoreResult<bool> {
        let mut inner = self.lock();
        let Some(list) = inner.memory.get_mut(&(owner_id.to_owned(), kind)) else {
            return Ok(false);
        };
        let before = list.len();
        list.retain(|r| r.id != id);
        let deleted = list.len() != before;
        if deleted {
            inner.bump_revision(owner_id, kind);
        }
        Ok(deleted)
    }

    async fn count(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<u64> {
        Ok(self
            .lock()
            .memory
            .get(&(owner_id.to_owned(), kind))
            .map_or(0, |l| l.len() as u64))
    }

    async fn revision(&self, owner_id: &str, kind: MemoryKind) -> StoreResult<u64> {
        Ok(self
            .lock()
            .memory_revisions
            .get(&(owner_id.to_owned(), kind))
            .copied()
            .unwrap_or(0))
    }
}

fn check_owner(owner: &str) -> StoreResult<()> {
    if owner.is_empty() {
        return Err(StoreError::Invalid("owner must not be empty"));
    }
    Ok(())
}

#[async_trait]
impl OwnerStore for MemoryBackend {
    async fn owner_threads(&self, owner: &str) -> StoreResult<Vec<String>> {
        check_owner(owner)?;
        Ok(self.lock().owner_threads(owner))
    }

    async fn owner_feedback(&self, owner: &str) -> StoreResult<Vec<FeedbackRecord>> {
        check_owner(owner)?;
        Ok(self
            .lock()
            .feedback
            .iter()
            .filter(|f| f.user_id_or_null.as_deref() == Some(owner))
            .cloned()
            .collect())
    }

    async fn owner_counts(&self, owner: &str) -> StoreResult<OwnerCounts> {
        check_owner(owner)?;
        let users = self.users().iter().filter(|u| u.name == owner).count() as u64;
        Ok(self.lock().owner_counts(owner, users))
    }

    async fn delete_owner_thread(&self, thread_id: &str) -> StoreResult<OwnerCounts> {
        let mut inner = self.lock();
        let data = inner.threads.remove(thread_id);
        Ok(OwnerCounts {
            threads: u64::from(data.as_ref().is_some_and(|d| d.state.is_some())),
            messages: data.map_or(0, |d| d.transcript.len() as u64),
            open_sessions: u64::from(inner.sessions.remove(thread_id).is_some()),
            voice_statuses: u64::from(inner.voice.remove(thread_id).is_some()),
            ..OwnerCounts::default()
        })
    }

    async fn delete_owner(&self, owner: &str) -> StoreResult<OwnerCounts> {
        check_owner(owner)?;
        // Users first, then the rest under one lock: the same order as
        // `owner_counts`, and no other write interleaves with the rest.
        let api_users = {
            let mut users = self.users();
            let before = users.len();
            users.retain(|u| u.name != owner);
            (before - users.len()) as u64
        };
        let mut inner = self.lock();
        let counts = inner.owner_counts(owner, api_users);
        let owned = inner.owner_threads(owner);
        let keyed = |t: &str| Inner::thread_keyed(owner, &owned, t);
        inner.threads.retain(|id, _| !keyed(id));
        inner.sessions.retain(|id, _| !keyed(id));
        inner.voice.retain(|id, _| !keyed(id));
        inner.memory.retain(|(o, _), _| o != owner);
        inner.channels.chats.retain(|_, c| c.owner_id != owner);
        inner.safety_plans.remove(owner);
        inner.memory_revisions.retain(|(o, _), _| o != owner);
        inner
            .feedback
            .retain(|f| f.user_id_or_null.as_deref() != Some(owner));
        for c in inner
            .crisis
            .iter_mut()
            .filter(|c| c.user_id_or_null.as_deref() == Some(owner))
        {
            c.user_id_or_null = None;
        }
        Ok(counts)
    }
}

#[async_trait]
impl CrisisLog for MemoryBackend {
    async fn append(&self, record: &CrisisRecord) -> StoreResult<bool> {
        let mut inner = self.lock();
        if inner.crisis.iter().any(|r| r.id == record.id) {
            return Ok(false);
        }
        inner.crisis.push(record.clone().normalized());
        Ok(true)
    }

    async fn daily_counts(&self, since: NaiveDate) -> StoreResult<Vec<DailyCrisisCount>> {
        let inner = self.lock();
        let mut counts: BTreeMap<
            (NaiveDate, u8, &'static str),
            (crate::records::ResponsePath, u64),
        > = BTreeMap::new();
        for r in inner
            .crisis
            .iter()
            .filter(|r| r.detected_at.date_naive() >= since)
        {
            let key = (
                r.detected_at.date_naive(),
                r.level.get(),
                r.response_path.as_str(),
            );
            counts.entry(key).or_insert((r.response_path, 0)).1 += 1;
        }
        Ok(counts
            .into_iter()
            .map(
                |((day, level, _), (response_path, count))| DailyCrisisCount {
                    day,
                    level,
                    response_path,
                    count,
                },
            )
            .collect())
    }

    async fn purge_before(&self, cutoff: DateTime<Utc>, now: DateTime<Utc>) -> StoreResult<u64> {
        let mut inner = self.lock();
        let before = inner.crisis.len();
        inner.crisis.retain(|r| !r.purgeable(cutoff, now));
        Ok((before - inner.crisis.len()) as u64)
    }

    async fn count(&self) -> StoreResult<u64> {
        Ok(self.lock().crisis.len() as u64)
    }

    async fn list_for_session(&self, session_id_opaque: &str) -> StoreResult<Vec<CrisisRecord>> {
        Ok(self
            .lock()
            .crisis
            .iter()
            .filter(|r| r.session_id_opaque == session_id_opaque)
            .cloned()
            .collect())
    }
}

#[async_trait]
impl FeedbackStore for MemoryBackend {
    async fn append(&self, record: &FeedbackRecord) -> StoreResult<()> {
        let mut inner = self.lock();
        if inner.feedback.iter().any(|r| r.id == record.id) {
            return Err(StoreError::Conflict {
                what: "feedback record",
            });
        }
        inner.feedback.push(record.clone());
        Ok(())
    }

    async fn list_for_session(&self, session_id_opaque: &str) -> StoreResult<Vec<FeedbackRecord>> {
        Ok(self
            .lock()
            .feedback
            .iter()
            .filter(|r| r.session_id_opaque == session_id_opaque)
            .cloned()
            .collect())
    }

    async fn count(&self) -> StoreResult<u64> {
        Ok(self.lock().feedback.len() as u64)
    }
}

#[async_trait]
impl VoiceFinalizationStore for MemoryBackend {
    async fn set(&self, status: &VoiceFinalization) -> StoreResult<()> {
        self.lock()
            .voice
            .insert(status.thread_id.clone(), status.clone());
        Ok(())
    }

    async fn get(&self, thread_id: &str) -> StoreResult<Option<VoiceFinalization>> {
        Ok(self.lock().voice.get(thread_id).cloned())
    }
}
