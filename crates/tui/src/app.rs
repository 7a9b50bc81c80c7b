//! The state of the full-screen client: the transcript, the reply being
//! streamed, the input line with this run's history, scrolling, the header,
//! the diagnostics and crisis panels. Drawn by [`crate::ui::draw`]; no I/O.

use serde_json::Value;

use crate::commands;
use crate::markdown::Stream;
use crate::session::{Session, UiMode};
use crate::theme::{Theme, ThemeName};

/// One entry of the transcript.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// The person's message.
    User(String),
    /// A reply (markdown); a crisis reply is marked.
    Assistant {
        /// The reply.
        text: String,
        /// A crisis reply.
        crisis: bool,
    },
    /// Command output and notices.
    System(String),
    /// Something went wrong.
    Error(String),
}

/// What the crisis panel shows while an episode is open.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CrisisPanel {
    /// The verified resources (name, phone, SMS, URL).
    pub resources: Vec<Value>,
    /// The person's own safety plan, one line per section (empty when
    /// they have none, and always in incognito).
    pub plan: Vec<String>,
}

/// The header's facts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Header {
    /// Runtime mode (effective).
    pub mode: String,
    /// Memory mode.
    pub memory: String,
    /// Current thread.
    pub thread: String,
    /// Memory owner.
    pub owner: String,
    /// Reply model.
    pub model: String,
}

/// The input line with this run's history (in memory only).
#[derive(Debug, Clone, Default)]
pub struct InputLine {
    /// The text typed.
    pub text: String,
    /// The cursor, in characters.
    pub cursor: usize,
    history: Vec<String>,
    browsing: Option<usize>,
    draft: String,
}

impl InputLine {
    /// Inserts a character at the cursor.
    pub fn insert(&mut self, c: char) {
        let at = self.byte_at(self.cursor);
        self.text.insert(at, c);
        self.cursor += 1;
    }

    /// Inserts text at the cursor (a paste; newlines become spaces).
    pub fn insert_str(&mut self, s: &str) {
        for c in s.chars() {
            self.insert(if c == '\n' || c == '\r' { ' ' } else { c });
        }
    }

    fn byte_at(&self, chars: usize) -> usize {
        self.text
            .char_indices()
            .nth(chars)
            .map_or(self.text.len(), |(i, _)| i)
    }

    /// Deletes the character before the cursor.
    pub fn backspace(&mut self) {
        if self.cursor > 0 {
            self.cursor -= 1;
            let at = self.byte_at(self.cursor);
            self.text.remove(at);
        }
    }

    /// Deletes the character under the cursor.
    pub fn delete(&mut self) {
        if self.cursor < self.text.chars().count() {
            let at = self.byte_at(self.cursor);
            self.text.remove(at);
        }
    }

    /// Moves the cursor.
    pub fn left(&mut self) {
        self.cursor = self.cursor.saturating_sub(1);
    }

    /// Moves the cursor.
    pub fn right(&mut self) {
        self.cursor = (self.cursor + 1).min(self.text.chars().count());
    }

    /// Cursor to the start.
    pub fn home(&mut self) {
        self.cursor = 0;
    }

    /// Cursor to the end.
    pub fn end(&mut self) {
        self.cursor = self.text.chars().count();
    }

    /// Empties the line.
    pub fn clear(&mut self) {
        self.text.clear();
        self.cursor = 0;
        self.browsing = None;
    }

    /// Takes the line (kept in this run's history).
    pub fn take(&mut self) -> String {
        let line = std::mem::take(&mut self.text);
        self.cursor = 0;
        self.browsing = None;
        if !line.trim().is_empty() && self.history.last() != Some(&line) {
            self.history.push(line.clone());
        }
        line
    }

    /// An earlier line of this run.
    pub fn up(&mut self) {
        if self.history.is_empty() {
            return;
        }
        let i = match self.browsing {
            None => {
                self.draft = self.text.clone();
                self.history.len() - 1
            }
            Some(i) => i.saturating_sub(1),
        };
        self.browsing = Some(i);
        self.text = self.history[i].clone();
        self.end();
    }

    /// A later line (or the draft).
    pub fn down(&mut self) {
        let Some(i) = self.browsing else { return };
        if i + 1 < self.history.len() {
            self.browsing = Some(i + 1);
            self.text = self.history[i + 1].clone();
        } else {
            self.browsing = None;
            self.text = std::mem::take(&mut self.draft);
        }
        self.end();
    }

    /// Completes a `/command` (to the one match, or the matches' common
    /// start).
    pub fn complete(&mut self) {
        let matches = commands::complete(&self.text);
        let Some(first) = matches.first() else { return };
        let common = matches.iter().fold(first.to_string(), |acc, m| {
            acc.chars()
                .zip(m.chars())
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| a)
                .collect()
        });
        self.text = if matches.len() == 1 {
            format!("/{common} ")
        } else {
            format!("/{common}")
        };
        self.end();
    }

    /// The commands the line could complete to.
    pub fn completions(&self) -> Vec<&'static str> {
        commands::complete(&self.text)
    }
}

/// The whole screen's state.
#[derive(Debug, Clone)]
pub struct App {
    /// The transcript.
    pub entries: Vec<Entry>,
    /// The reply being streamed, if any.
    pub streaming: Option<Stream>,
    /// A turn is running.
    pub busy: bool,
    /// The turn's current stage, while no text came yet.
    pub stage: Option<String>,
    /// Reply characters received so far.
    pub received: usize,
    /// Ctrl-C was pressed for this turn.
    pub cancelling: bool,
    /// The input line.
    pub input: InputLine,
    /// Lines scrolled up from the bottom (0 follows the conversation).
    pub scroll: usize,
    /// The header.
    pub header: Header,
    /// The theme.
    pub theme: Theme,
    /// The diagnostics panel shown.
    pub ui_full: bool,
    /// The last turn's diagnostics.
    pub diagnostics: Vec<String>,
    /// The crisis panel, while an episode is open.
    pub crisis: Option<CrisisPanel>,
    /// A question waiting for its answer.
    pub question: Option<String>,
    /// The transcript's height at the last draw (PageUp/PageDown steps).
    pub page: usize,
    /// The transcript's width at the last draw.
    pub width: usize,
}

impl App {
    /// An empty screen with `theme`.
    pub fn new(theme: ThemeName) -> App {
        App {
            entries: Vec::new(),
            streaming: None,
            busy: false,
            stage: None,
            received: 0,
            cancelling: false,
            input: InputLine::default(),
            scroll: 0,
            header: Header::default(),
            theme: Theme::of(theme),
            ui_full: false,
            diagnostics: Vec::new(),
            crisis: None,
            question: None,
            page: 10,
            width: 80,
        }
    }

    /// Takes the session's settings, thread and panels.
    pub fn sync(&mut self, s: &Session) {
        self.header = Header {
            mode: s.service().mode().to_string(),
            memory: s.memory_mode.to_string(),
            thread: s.thread.clone(),
            owner: match &s.user {
                Some(u) => u.clone(),
                None => "thread-scoped".to_owned(),
            },
            model: s.model(),
        };
        if self.theme.name != s.theme {
            self.theme = Theme::of(s.theme);
            if let Some(stream) = &mut self.streaming {
                stream.relayout(self.width, &self.theme);
            }
        }
        self.ui_full = s.ui == UiMode::Full;
        self.diagnostics = s
            .last
            .as_deref()
            .map(crate::diag::lines)
            .unwrap_or_default();
        self.crisis = s.crisis_open.then(|| CrisisPanel {
            resources: s.crisis_resources.clone(),
            plan: s.crisis_plan.clone(),
        });
    }

    /// Adds command output.
    pub fn system(&mut self, text: impl Into<String>) {
        let text = text.into();
        if !text.is_empty() {
            self.entries.push(Entry::System(text));
            self.scroll = 0;
        }
    }

    /// A turn starts.
    pub fn start_turn(&mut self, message: String) {
        self.entries.push(Entry::User(message));
        self.busy = true;
        self.stage = None;
        self.received = 0;
        self.cancelling = false;
        self.scroll = 0;
    }

    /// More reply text.
    pub fn text(&mut self, text: &str) {
        self.stage = None;
        self.received += text.chars().count();
        let (width, theme) = (self.width, self.theme);
        self.streaming
            .get_or_insert_with(|| Stream::new(width, &theme))
            .push(text);
    }

    /// The reply is final.
    pub fn final_reply(&mut self, text: String, crisis: bool) {
        self.streaming = None;
        self.entries.push(Entry::Assistant { text, crisis });
        self.end_turn();
    }

    /// The turn ended without a reply.
    pub fn end_turn(&mut self) {
        self.busy = false;
        self.stage = None;
        self.cancelling = false;
    }

    /// Scrolls up a page.
    pub fn page_up(&mut self) {
        self.scroll += self.page.max(1);
    }

    /// Scrolls down a page.
    pub fn page_down(&mut self) {
        self.scroll = self.scroll.saturating_sub(self.page.max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_walks_back_and_forth_and_keeps_the_draft() {
        let mut i = InputLine::default();
        for line in ["one", "two"] {
            i.insert_str(line);
            assert_eq!(i.take(), line);
        }
        i.insert_str("dra");
        i.up();
        assert_eq!(i.text, "two");
        i.up();
        assert_eq!(i.text, "one");
        i.up();
        assert_eq!(i.text, "one");
        i.down();
        i.down();
        assert_eq!(i.text, "dra");
    }

    #[test]
    fn tab_completes_commands() {
        let mut i = InputLine::default();
        i.insert_str("/thr");
        i.complete();
        assert_eq!(i.text, "/threads ");
        let mut j = InputLine::default();
        j.insert_str("/ex");
        j.complete();
        assert_eq!(j.text, "/ex");
        assert_eq!(j.completions(), vec!["export", "exit", "exercises"]);
    }

    #[test]
    fn editing_in_the_middle_of_a_line() {
        let mut i = InputLine::default();
        i.insert_str("hllo");
        i.home();
        i.right();
        i.insert('e');
        i.end();
        i.backspace();
        i.insert('o');
        assert_eq!(i.text, "hello");
    }
}
