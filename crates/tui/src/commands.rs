//! The command set of the terminal client, shared by the full-screen and
//! the line mode: the table of commands with their help text, the parser of
//! a typed line, and the closest suggestion for an unknown command.

use std::fmt::Write as _;

/// The group a command is listed under in `/help`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// The conversation and its data.
    Session,
    /// How the screen looks.
    Display,
    /// Saved memory.
    Memory,
    /// Conversation threads.
    Threads,
    /// How turns run.
    Runtime,
}

impl Group {
    /// The heading in `/help`.
    pub fn title(self) -> &'static str {
        match self {
            Group::Session => "session",
            Group::Display => "display",
            Group::Memory => "memory",
            Group::Threads => "threads",
            Group::Runtime => "runtime",
        }
    }
}

/// One command of the table.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Its name, without the slash.
    pub name: &'static str,
    /// Short names that mean the same.
    pub aliases: &'static [&'static str],
    /// Its arguments as shown in help (empty when none).
    pub args: &'static str,
    /// One line of help.
    pub help: &'static str,
    /// Where it is listed.
    pub group: Group,
}

/// Every command, in help order.
pub const COMMANDS: &[Spec] = &[
    Spec {
        name: "help",
        aliases: &["h"],
        args: "[COMMAND]",
        help: "this list, or the help of one command",
        group: Group::Session,
    },
    Spec {
        name: "status",
        aliases: &["s"],
        args: "",
        help: "thread, owner, memory mode, runtime mode, tier, turns",
        group: Group::Session,
    },
    Spec {
        name: "history",
        aliases: &[],
        args: "[N]",
        help: "the last N messages of this thread (6 by default)",
        group: Group::Session,
    },
    Spec {
        name: "context",
        aliases: &[],
        args: "",
        help: "what this thread carries: turns, route, style, exercise, crisis episode",
        group: Group::Session,
    },
    Spec {
        name: "search",
        aliases: &[],
        args: "history|memory|all QUERY",
        help: "find words in this thread's messages or your saved memory",
        group: Group::Session,
    },
    Spec {
        name: "summary",
        aliases: &[],
        args: "[short|full]",
        help: "this conversation so far and your last session summaries",
        group: Group::Session,
    },
    Spec {
        name: "export",
        aliases: &[],
        args: "md|json|txt [FILE]",
        help: "write this thread's conversation to a file (only where you say)",
        group: Group::Session,
    },
    Spec {
        name: "reset",
        aliases: &[],
        args: "",
        help: "end the session without feedback and start a fresh one on this thread",
        group: Group::Session,
    },
    Spec {
        name: "clear",
        aliases: &["c"],
        args: "",
        help: "clear the screen (the conversation is kept)",
        group: Group::Session,
    },
    Spec {
        name: "end",
        aliases: &[],
        args: "[new [THREAD]]",
        help: "end the session (asks for feedback) and see its summary; `new` starts another thread",
        group: Group::Session,
    },
    Spec {
        name: "forget-me",
        aliases: &[],
        args: "",
        help: "delete everything kept for you (type FORGET to confirm)",
        group: Group::Session,
    },
    Spec {
        name: "exit",
        aliases: &[],
        args: "",
        help: "leave (asks for feedback after a conversation)",
        group: Group::Session,
    },
    Spec {
        name: "quit",
        aliases: &["q"],
        args: "",
        help: "the same as /exit",
        group: Group::Session,
    },
    Spec {
        name: "keys",
        aliases: &["k"],
        args: "",
        help: "the keys of the full-screen client",
        group: Group::Display,
    },
    Spec {
        name: "ui",
        aliases: &[],
        args: "compact|full",
        help: "full shows the last turn's diagnostics panel, compact hides it",
        group: Group::Display,
    },
    Spec {
        name: "theme",
        aliases: &["t"],
        args: "mono|contrast|calm",
        help: "colours (mono when NO_COLOR is set)",
        group: Group::Display,
    },
    Spec {
        name: "memory",
        aliases: &["m"],
        args: "status|list|recall on|off|forget KIND N|clear KIND",
        help: "what is saved; forget one item; clear facts|sessions|rules|all (type CLEAR)",
        group: Group::Memory,
    },
    Spec {
        name: "threads",
        aliases: &[],
        args: "[N]",
        help: "your most recent threads (12 by default)",
        group: Group::Threads,
    },
    Spec {
        name: "resume",
        aliases: &[],
        args: "ID",
        help: "continue another thread",
        group: Group::Threads,
    },
    Spec {
        name: "new",
        aliases: &[],
        args: "[ID]",
        help: "start a new thread (the current one stays saved)",
        group: Group::Threads,
    },
    Spec {
        name: "mode",
        aliases: &[],
        args: "[deterministic|hybrid|auto]",
        help: "show or change how replies are made",
        group: Group::Runtime,
    },
    Spec {
        name: "response-tier",
        aliases: &[],
        args: "[fast|quality]",
        help: "which model writes replies",
        group: Group::Runtime,
    },
    Spec {
        name: "verbosity",
        aliases: &[],
        args: "[compact|verbose]",
        help: "verbose shows route and style under each reply",
        group: Group::Runtime,
    },
    Spec {
        name: "trace",
        aliases: &[],
        args: "on|off|once",
        help: "print each turn's stage timings and route (once: the next turn only)",
        group: Group::Runtime,
    },
    Spec {
        name: "exercises",
        aliases: &[],
        args: "",
        help: "the guided exercises (ask for one by name to start it)",
        group: Group::Runtime,
    },
    Spec {
        name: "sos",
        aliases: &["help-now"],
        args: "[COUNTRY]",
        help: "your safety plan and the verified crisis lines (COUNTRY: a code such as GB); no model, nothing sent",
        group: Group::Session,
    },
    Spec {
        name: "plan",
        aliases: &[],
        args: "[build|delete]",
        help: "your safety plan: show it (or start one), build or continue it step by step, or delete it",
        group: Group::Memory,
    },
    Spec {
        name: "doctor",
        aliases: &[],
        args: "[verbose]",
        help: "check configuration, database, data directory, models and crisis directory",
        group: Group::Session,
    },
];

/// The spec of a command name or alias.
pub fn find(name: &str) -> Option<&'static Spec> {
    COMMANDS
        .iter()
        .find(|s| s.name == name || s.aliases.contains(&name))
}

/// What a typed line is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Nothing (only spaces).
    Empty,
    /// A message for the conversation (`//x` sends `/x`).
    Message(String),
    /// A known command with its arguments.
    Command {
        /// The command's canonical name.
        name: &'static str,
        /// The words after it.
        args: Vec<String>,
    },
    /// A slash word that names no command.
    Unknown {
        /// What was typed (without the slash).
        name: String,
        /// The closest command, when one is close.
        suggestion: Option<&'static str>,
    },
}

/// Reads one typed line.
pub fn parse(line: &str) -> Input {
    let text = line.trim();
    if text.is_empty() {
        return Input::Empty;
    }
    if let Some(rest) = text.strip_prefix("//") {
        return Input::Message(format!("/{rest}"));
    }
    let Some(cmd) = text.strip_prefix('/') else {
        return Input::Message(text.to_owned());
    };
    let mut words = cmd.split_whitespace();
    let word = words.next().unwrap_or("");
    let lower = word.to_lowercase();
    match find(&lower) {
        Some(spec) => Input::Command {
            name: spec.name,
            args: words.map(str::to_owned).collect(),
        },
        None => Input::Unknown {
            suggestion: suggest(&lower),
            name: word.to_owned(),
        },
    }
}

/// The closest command name to `word` (edit distance at most 2, or a
/// prefix), if any.
pub fn suggest(word: &str) -> Option<&'static str> {
    if word.is_empty() {
        return None;
    }
    if let Some(spec) = COMMANDS.iter().find(|s| s.name.starts_with(word)) {
        return Some(spec.name);
    }
    let mut best: Option<(usize, &'static str)> = None;
    for spec in COMMANDS {
        for cand in std::iter::once(&spec.name).chain(spec.aliases.iter()) {
            if cand.len() < 2 {
                continue;
            }
            let d = distance(word, cand);
            if best.is_none_or(|(b, _)| d < b) {
                best = Some((d, spec.name));
            }
        }
    }
    let limit = if word.chars().count() <= 3 { 1 } else { 2 };
    best.filter(|(d, _)| *d <= limit).map(|(_, n)| n)
}

/// Levenshtein distance (with transpositions counted as one edit).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev2: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(prev2[j - 2] + 1);
            }
            cur[j] = v;
        }
        prev2 = std::mem::replace(&mut prev, cur);
    }
    prev[b.len()]
}

/// The whole `/help` text.
pub fn help_text() -> String {
    let mut out =
        String::from("Commands (a line starting with / is a command; // sends a slash):\n");
    let width = COMMANDS
        .iter()
        .map(|s| usage(s).chars().count())
        .max()
        .unwrap_or(0)
        .min(34);
    let mut group = None;
    for spec in COMMANDS.iter().filter(|s| s.group == Group::Session) {
        push_row(&mut out, spec, width, &mut group);
    }
    for g in [
        Group::Display,
        Group::Memory,
        Group::Threads,
        Group::Runtime,
    ] {
        for spec in COMMANDS.iter().filter(|s| s.group == g) {
            push_row(&mut out, spec, width, &mut group);
        }
    }
    out.push_str(
        "Anything else is sent to OpenCouch. If you are in danger, call your local emergency number.",
    );
    out
}

fn push_row(out: &mut String, spec: &Spec, width: usize, group: &mut Option<Group>) {
    if *group != Some(spec.group) {
        *group = Some(spec.group);
        let _ = writeln!(out, "{}:", spec.group.title());
    }
    let u = usage(spec);
    if u.chars().count() > width {
        let _ = writeln!(out, "  {u}\n  {:width$}  {}", "", spec.help);
    } else {
        let _ = writeln!(out, "  {u:width$}  {}", spec.help);
    }
}

/// `/name ARGS`.
pub fn usage(spec: &Spec) -> String {
    if spec.args.is_empty() {
        format!("/{}", spec.name)
    } else {
        format!("/{} {}", spec.name, spec.args)
    }
}

/// The help of one command (with its aliases).
pub fn help_of(spec: &Spec) -> String {
    let mut s = format!("{}  {}", usage(spec), spec.help);
    if !spec.aliases.is_empty() {
        let aliases: Vec<String> = spec.aliases.iter().map(|a| format!("/{a}")).collect();
        let _ = write!(s, " (also {})", aliases.join(", "));
    }
    s
}

/// The keys of the full-screen client.
pub const KEYS: &str = "\
Keys:
  Enter             send the line (or run the command)
  Up / Down         earlier / later lines typed in this run
  Tab               complete a /command
  PageUp / PageDown scroll the conversation (also the mouse wheel)
  Home / End        start / end of the input line
  Ctrl-C            stop a reply that is being written (a crisis reply is never stopped)
  Ctrl-L            redraw the screen
  Ctrl-D            leave";

/// Completions of a partly typed `/command` (names starting with it).
pub fn complete(prefix: &str) -> Vec<&'static str> {
    let Some(word) = prefix.strip_prefix('/') else {
        return Vec::new();
    };
    if word.contains(char::is_whitespace) {
        return Vec::new();
    }
    COMMANDS
        .iter()
        .filter(|s| s.name.starts_with(word))
        .map(|s| s.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slash_lines_are_commands_and_double_slash_sends_a_slash() {
        assert_eq!(parse("  hello "), Input::Message("hello".into()));
        assert_eq!(parse("//end"), Input::Message("/end".into()));
        assert_eq!(
            parse("/end new t2"),
            Input::Command {
                name: "end",
                args: vec!["new".into(), "t2".into()]
            }
        );
        assert_eq!(
            parse("/q"),
            Input::Command {
                name: "quit",
                args: vec![]
            }
        );
        assert_eq!(parse("   "), Input::Empty);
    }

    #[test]
    fn unknown_commands_get_the_closest_name() {
        for (typed, want) in [
            ("hepl", Some("help")),
            ("histroy", Some("history")),
            ("thread", Some("threads")),
            ("exprot", Some("export")),
            ("memroy", Some("memory")),
            ("resum", Some("resume")),
            ("xyzzy", None),
        ] {
            match parse(&format!("/{typed}")) {
                Input::Unknown { suggestion, .. } => assert_eq!(suggestion, want, "{typed}"),
                other => panic!("{typed}: {other:?}"),
            }
        }
    }

    #[test]
    fn every_command_has_help_and_is_in_the_list() {
        let help = help_text();
        for spec in COMMANDS {
            assert!(!spec.help.is_empty(), "{}", spec.name);
            assert!(help.contains(&format!("/{}", spec.name)), "{}", spec.name);
            assert_eq!(find(spec.name).map(|s| s.name), Some(spec.name));
        }
    }

    /// Item 2 of issue 27, word for word: every command exists with help
    /// text and the arguments the issue names.
    #[test]
    fn the_issues_whole_command_set_is_here() {
        for (name, args) in [
            ("help", ""),
            ("status", ""),
            ("doctor", "verbose"),
            ("history", "N"),
            ("context", ""),
            ("search", "history|memory|all QUERY"),
            ("summary", "short|full"),
            ("export", "md|json|txt [FILE]"),
            ("reset", ""),
            ("clear", ""),
            ("end", "new [THREAD]"),
            ("exit", ""),
            ("quit", ""),
            ("keys", ""),
            ("ui", "compact|full"),
            ("theme", "mono|contrast|calm"),
            ("memory", "status|list|recall"),
            ("threads", "N"),
            ("resume", "ID"),
            ("new", "ID"),
            ("mode", ""),
            ("response-tier", "fast|quality"),
            ("verbosity", "compact|verbose"),
            ("trace", "on|off|once"),
            ("exercises", ""),
            ("forget-me", ""),
        ] {
            let spec = find(name).unwrap_or_else(|| panic!("/{name} is missing"));
            assert!(!spec.help.is_empty(), "/{name} has no help");
            assert!(spec.args.contains(args), "/{name}: {}", spec.args);
        }
        let memory = find("memory").map(|s| s.args).unwrap_or_default();
        for sub in ["status", "list", "recall", "forget", "clear"] {
            assert!(memory.contains(sub), "/memory {sub}");
        }
    }

    #[test]
    fn completion_lists_matching_names() {
        assert_eq!(complete("/th"), vec!["theme", "threads"]);
        assert_eq!(complete("/thr"), vec!["threads"]);
        assert_eq!(complete("/e"), vec!["export", "end", "exit", "exercises"]);
        assert!(complete("/end n").is_empty());
        assert!(complete("hello").is_empty());
    }
}
