//! Themes of the full-screen client: mono (no colour, also when `NO_COLOR`
//! is set), contrast and calm.

use ratatui::style::{Color, Modifier, Style};

/// A theme's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThemeName {
    /// No colour: bold, italics, underline and reverse only.
    Mono,
    /// Bright colours on the terminal's background.
    Contrast,
    /// Soft colours.
    Calm,
}

impl ThemeName {
    /// Reads `mono`, `contrast` or `calm`.
    pub fn parse(s: &str) -> Option<ThemeName> {
        match s {
            "mono" => Some(ThemeName::Mono),
            "contrast" => Some(ThemeName::Contrast),
            "calm" => Some(ThemeName::Calm),
            _ => None,
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            ThemeName::Mono => "mono",
            ThemeName::Contrast => "contrast",
            ThemeName::Calm => "calm",
        }
    }

    /// The theme to start with: mono when `no_color` (the `NO_COLOR`
    /// convention), calm otherwise.
    pub fn initial(no_color: bool) -> ThemeName {
        if no_color {
            ThemeName::Mono
        } else {
            ThemeName::Calm
        }
    }
}

/// The styles of everything drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Theme {
    /// Which one.
    pub name: ThemeName,
    /// The header bar.
    pub header: Style,
    /// The person's own lines.
    pub user: Style,
    /// The "you" / "opencouch" labels.
    pub label: Style,
    /// Reply text.
    pub text: Style,
    /// Command output and notices.
    pub system: Style,
    /// Errors.
    pub error: Style,
    /// Inline code and code blocks.
    pub code: Style,
    /// Links.
    pub link: Style,
    /// Headings.
    pub heading: Style,
    /// Panel borders.
    pub border: Style,
    /// The crisis panel's border and title.
    pub crisis: Style,
    /// The status line.
    pub status: Style,
}

impl Theme {
    /// The styles of `name`.
    pub fn of(name: ThemeName) -> Theme {
        let plain = Style::default();
        let bold = plain.add_modifier(Modifier::BOLD);
        match name {
            ThemeName::Mono => Theme {
                name,
                header: plain.add_modifier(Modifier::REVERSED),
                user: bold,
                label: bold,
                text: plain,
                system: plain.add_modifier(Modifier::DIM),
                error: bold,
                code: plain.add_modifier(Modifier::REVERSED),
                link: plain.add_modifier(Modifier::UNDERLINED),
                heading: bold.add_modifier(Modifier::UNDERLINED),
                border: plain,
                crisis: bold,
                status: plain.add_modifier(Modifier::DIM),
            },
            ThemeName::Contrast => Theme {
                name,
                header: bold.fg(Color::Black).bg(Color::White),
                user: bold.fg(Color::White),
                label: bold.fg(Color::Yellow),
                text: plain.fg(Color::White),
                system: plain.fg(Color::Cyan),
                error: bold.fg(Color::LightRed),
                code: plain.fg(Color::LightGreen),
                link: plain
                    .fg(Color::LightBlue)
                    .add_modifier(Modifier::UNDERLINED),
                heading: bold.fg(Color::Yellow),
                border: plain.fg(Color::White),
                crisis: bold.fg(Color::LightRed),
                status: plain.fg(Color::Yellow),
            },
            ThemeName::Calm => Theme {
                name,
                header: plain.fg(Color::Black).bg(Color::Rgb(150, 180, 200)),
                user: plain.fg(Color::Rgb(200, 200, 160)),
                label: bold.fg(Color::Rgb(120, 170, 190)),
                text: plain,
                system: plain.fg(Color::Rgb(140, 150, 160)),
                error: plain.fg(Color::Rgb(220, 120, 110)),
                code: plain.fg(Color::Rgb(170, 200, 150)),
                link: plain
                    .fg(Color::Rgb(120, 170, 210))
                    .add_modifier(Modifier::UNDERLINED),
                heading: bold.fg(Color::Rgb(150, 180, 200)),
                border: plain.fg(Color::Rgb(100, 110, 120)),
                crisis: bold.fg(Color::Rgb(230, 110, 100)),
                status: plain.fg(Color::Rgb(140, 150, 160)),
            },
        }
    }
}
