//! Replies as Telegram shows them: Markdown converted to the Bot API's HTML
//! subset, cut into messages Telegram accepts, and the crisis message with
//! its resources.
//!
//! * **Escaping**: text outside tags escapes `&`, `<` and `>`, attribute
//!   values also `"`, with exactly the entities Telegram knows (`&amp;`,
//!   `&lt;`, `&gt;`, `&quot;`).
//! * **Tags**: `<b>` (`**bold**`, `__bold__`, headings), `<i>` (`*it*`,
//!   `_it_` at word edges), `<s>` (`~~x~~`), `<code>` (`` `x` ``), `<pre>`
//!   (fenced blocks, `<pre><code class="language-x">` with a language),
//!   `<blockquote>` (`> x`) and `<a href>` (only `http`, `https`, `tel` and
//!   `mailto` links; any other link stays text). Lists become `•` lines.
//!   Every construct is rendered with both of its tags, so the output is
//!   always balanced; an unmatched marker stays a literal character.
//! * **Splitting** ([`split_message`]): at most [`MESSAGE_LIMIT`] UTF-16
//!   units per message (Telegram counts UTF-16; 4,000 leaves room under
//!   its 4,096), cut between blocks (paragraphs, lists, quotes, code),
//!   else between sentences, else between words, else between characters;
//!   each piece is rendered on its own, so no message ever ends inside a
//!   tag or an entity.

use serde_json::Value;

/// The longest message this channel sends, in UTF-16 units.
pub const MESSAGE_LIMIT: usize = 4000;

/// The length Telegram measures: UTF-16 code units.
pub fn tg_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// Escapes text for Telegram HTML (outside tags).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes an attribute value (also `"`).
pub fn escape_attr(s: &str) -> String {
    escape(s).replace('"', "&quot;")
}

/// The text of Telegram HTML without its tags, entities decoded (the
/// plain-text fallback when Telegram refuses the markup).
pub fn plain_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match (in_tag, c) {
            (false, '<') => in_tag = true,
            (true, '>') => in_tag = false,
            (false, c) => out.push(c),
            (true, _) => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

/// Whether a link target may become `<a href>`.
fn safe_url(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    ["http://", "https://", "tel:", "mailto:"]
        .iter()
        .any(|p| lower.starts_with(p) && lower.len() > p.len())
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Renders inline Markdown as Telegram HTML.
pub fn inline(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len() + 16);
    render_inline(&chars, &mut out);
    out
}

fn find_seq(chars: &[char], from: usize, seq: &[char]) -> Option<usize> {
    if seq.is_empty() || chars.len() < seq.len() {
        return None;
    }
    (from..=chars.len() - seq.len()).find(|&i| chars[i..i + seq.len()] == *seq)
}

fn is_word(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric())
}

/// A bold or strikethrough span opening at `i`: where its closing marker
/// starts, and the tag. A closing run of three markers (`***`) closes the
/// inner italics first.
fn double_marker(chars: &[char], i: usize) -> Option<(usize, &'static str)> {
    for (marker, tag) in [(['*', '*'], "b"), (['_', '_'], "b"), (['~', '~'], "s")] {
        if chars[i] == marker[0]
            && chars.get(i + 1) == Some(&marker[1])
            && chars.get(i + 2).is_some_and(|n| !n.is_whitespace())
            && let Some(mut end) = find_seq(chars, i + 2, &marker)
        {
            while chars.get(end + 2) == Some(&marker[0]) {
                end += 1;
            }
            if end > i + 2 && !chars[end - 1].is_whitespace() {
                return Some((end, tag));
            }
        }
    }
    None
}

fn render_inline(chars: &[char], out: &mut String) {
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        // A backslash makes the next character literal.
        if c == '\\' && next.is_some_and(|n| n.is_ascii_punctuation()) {
            out.push_str(&escape(&chars[i + 1].to_string()));
            i += 2;
            continue;
        }
        if c == '`'
            && let Some(end) = find_seq(chars, i + 1, &['`'])
            && end > i + 1
        {
            let code: String = chars[i + 1..end].iter().collect();
            out.push_str("<code>");
            out.push_str(&escape(&code));
            out.push_str("</code>");
            i = end + 1;
            continue;
        }
        // Double markers: bold and strikethrough.
        if let Some((end, tag)) = double_marker(chars, i) {
            out.push_str(&format!("<{tag}>"));
            render_inline(&chars[i + 2..end], out);
            out.push_str(&format!("</{tag}>"));
            i = end + 2;
            continue;
        }
        // Single markers: italics. `_` only at word edges (snake_case stays).
        if (c == '*' || c == '_')
            && next.is_some_and(|n| !n.is_whitespace() && n != c)
            && (c == '*' || !is_word(i.checked_sub(1).map(|p| &chars[p])))
            && let Some(end) = (i + 1..chars.len()).find(|&j| {
                chars[j] == c
                    && !chars[j - 1].is_whitespace()
                    && chars.get(j + 1) != Some(&c)
                    && (c == '*' || !is_word(chars.get(j + 1)))
            })
        {
            out.push_str("<i>");
            render_inline(&chars[i + 1..end], out);
            out.push_str("</i>");
            i = end + 1;
            continue;
        }
        if c == '['
            && let Some(close) = find_seq(chars, i + 1, &[']', '('])
            && let Some(end) = find_seq(chars, close + 2, &[')'])
        {
            let label = &chars[i + 1..close];
            let url: String = chars[close + 2..end].iter().collect();
            if !label.is_empty() && safe_url(&url) {
                out.push_str(&format!("<a href=\"{}\">", escape_attr(url.trim())));
                render_inline(label, out);
                out.push_str("</a>");
                i = end + 1;
                continue;
            }
        }
        out.push_str(&escape(&c.to_string()));
        i += 1;
    }
}

/// A block of a Markdown document.
#[derive(Debug, Clone, PartialEq)]
enum Block {
    /// Lines of a paragraph, heading or list, already in their shown form
    /// (Markdown inline syntax still to render).
    Text(String),
    /// A quote's text.
    Quote(String),
    /// A code block with its language.
    Code { lang: Option<String>, text: String },
}

fn list_item(line: &str) -> Option<String> {
    let t = line.trim_start();
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = t.strip_prefix(bullet) {
            return Some(format!("• {}", rest.trim()));
        }
    }
    let digits: String = t.chars().take_while(char::is_ascii_digit).collect();
    if !digits.is_empty()
        && let Some(rest) = t[digits.len()..]
            .strip_prefix(". ")
            .or_else(|| t[digits.len()..].strip_prefix(") "))
    {
        return Some(format!("{digits}. {}", rest.trim()));
    }
    None
}

fn heading(line: &str) -> Option<String> {
    let t = line.trim_start();
    let hashes = t.chars().take_while(|c| *c == '#').count();
    if (1..=6).contains(&hashes) {
        let rest = &t[hashes..];
        if let Some(text) = rest.strip_prefix(' ') {
            return Some(format!("**{}**", text.trim().trim_end_matches('#').trim()));
        }
    }
    None
}

fn blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut para: Vec<String> = Vec::new();
    let mut quote: Vec<String> = Vec::new();
    let flush = |para: &mut Vec<String>, quote: &mut Vec<String>, out: &mut Vec<Block>| {
        if !para.is_empty() {
            out.push(Block::Text(para.join("\n")));
            para.clear();
        }
        if !quote.is_empty() {
            out.push(Block::Quote(quote.join("\n")));
            quote.clear();
        }
    };
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(fence) = trimmed.strip_prefix("```") {
            flush(&mut para, &mut quote, &mut out);
            let lang = fence.trim();
            let lang = (!lang.is_empty()
                && lang
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-_#.".contains(c)))
            .then(|| lang.to_owned());
            let mut code = Vec::new();
            for l in lines.by_ref() {
                if l.trim_start().starts_with("```") {
                    break;
                }
                code.push(l);
            }
            out.push(Block::Code {
                lang,
                text: code.join("\n"),
            });
            continue;
        }
        if trimmed.is_empty() {
            flush(&mut para, &mut quote, &mut out);
            continue;
        }
        if let Some(q) = trimmed.strip_prefix('>') {
            if !para.is_empty() {
                out.push(Block::Text(para.join("\n")));
                para.clear();
            }
            quote.push(q.strip_prefix(' ').unwrap_or(q).to_owned());
            continue;
        }
        if !quote.is_empty() {
            out.push(Block::Quote(quote.join("\n")));
            quote.clear();
        }
        if let Some(h) = heading(line) {
            flush(&mut para, &mut quote, &mut out);
            out.push(Block::Text(h));
            continue;
        }
        if trimmed.chars().all(|c| c == '-' || c == '*' || c == '_') && trimmed.len() >= 3 {
            // A thematic break: a paragraph boundary.
            flush(&mut para, &mut quote, &mut out);
            continue;
        }
        para.push(list_item(line).unwrap_or_else(|| line.trim_end().to_owned()));
    }
    flush(&mut para, &mut quote, &mut out);
    out
}

fn render_text(src: &str) -> String {
    inline(src)
}

fn render_quote(src: &str) -> String {
    format!("<blockquote>{}</blockquote>", inline(src))
}

fn render_code(lang: Option<&str>, text: &str) -> String {
    match lang {
        Some(l) => format!(
            "<pre><code class=\"language-{}\">{}</code></pre>",
            escape_attr(l),
            escape(text)
        ),
        None => format!("<pre>{}</pre>", escape(text)),
    }
}

/// Converts a Markdown reply to Telegram HTML (one string, not split).
pub fn markdown_to_html(markdown: &str) -> String {
    blocks(markdown)
        .iter()
        .map(|b| match b {
            Block::Text(t) => render_text(t),
            Block::Quote(t) => render_quote(t),
            Block::Code { lang, text } => render_code(lang.as_deref(), text),
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Splits `text` after sentence ends (`.`, `!`, `?`, `…` followed by a
/// space) and line ends, keeping every character.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        cur.push(c);
        let end = c == '\n'
            || (matches!(c, '.' | '!' | '?' | '…') && chars.peek().is_some_and(|n| *n == ' '));
        if end {
            if c != '\n' {
                // Keep the space with the sentence it ends.
                if let Some(space) = chars.next() {
                    cur.push(space);
                }
            }
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Splits `text` after each run of whitespace, keeping every character.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_space = false;
    for c in text.chars() {
        if prev_space && !c.is_whitespace() {
            out.push(std::mem::take(&mut cur));
        }
        prev_space = c.is_whitespace();
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Packs consecutive `units` of source text into pieces whose rendering
/// fits `limit`, cutting a unit that is too long by `finer` (and, at the
/// end, by characters). Every piece is rendered on its own.
fn pack(
    units: Vec<String>,
    render: &dyn Fn(&str) -> String,
    limit: usize,
    finer: &[fn(&str) -> Vec<String>],
) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut cur = String::new();
    for unit in units {
        let candidate = format!("{cur}{unit}");
        if tg_len(&render(candidate.trim())) <= limit {
            cur = candidate;
            continue;
        }
        if !cur.trim().is_empty() {
            pieces.push(render(cur.trim()));
        }
        cur = String::new();
        if tg_len(&render(unit.trim())) <= limit {
            cur = unit;
            continue;
        }
        // This unit alone is too long: cut it finer.
        let sub = match finer.split_first() {
            Some((f, _)) => f(&unit),
            None => unit.chars().map(String::from).collect(),
        };
        let rest = finer.split_first().map_or(&[][..], |(_, r)| r);
        if sub.len() <= 1 && finer.is_empty() {
            // A single character that cannot fit: nothing to do but send it.
            pieces.push(render(unit.trim()));
            continue;
        }
        let mut inner = pack(sub, render, limit, rest);
        // Continue filling after the last inner piece? Keep it simple:
        // inner pieces stand alone.
        pieces.append(&mut inner);
    }
    if !cur.trim().is_empty() {
        pieces.push(render(cur.trim()));
    }
    pieces
}

/// Converts a Markdown reply to Telegram HTML messages of at most `limit`
/// UTF-16 units, in order (see the module documentation).
pub fn split_message(markdown: &str, limit: usize) -> Vec<String> {
    let mut rendered: Vec<String> = Vec::new();
    for block in blocks(markdown) {
        match block {
            Block::Text(t) => {
                rendered.extend(pack(vec![t], &render_text, limit, &[sentences, words]))
            }
            Block::Quote(t) => {
                rendered.extend(pack(vec![t], &render_quote, limit, &[sentences, words]))
            }
            Block::Code { lang, text } => {
                let lines: Vec<String> = text.split_inclusive('\n').map(str::to_owned).collect();
                let render = move |s: &str| render_code(lang.as_deref(), s);
                rendered.extend(pack(lines, &render, limit, &[]));
            }
        }
    }
    // Pack rendered blocks into messages, a blank line between blocks.
    let mut messages: Vec<String> = Vec::new();
    for piece in rendered {
        match messages.last_mut() {
            Some(last) if tg_len(last) + 2 + tg_len(&piece) <= limit => {
                last.push_str("\n\n");
                last.push_str(&piece);
            }
            _ => messages.push(piece),
        }
    }
    messages
}

/// Keeps the `+` and digits of a phone number, for a `tel:` link.
pub fn dial_digits(number: &str) -> String {
    number
        .chars()
        .enumerate()
        .filter(|(i, c)| c.is_ascii_digit() || (*i == 0 && *c == '+'))
        .map(|(_, c)| c)
        .collect()
}

/// The line under every crisis message.
pub const EMERGENCY_LINE: &str =
    "If you are in immediate danger, call your local emergency number now.";

/// The resources of a crisis reply as HTML lines: the service's name, a
/// `tel:` link to call, the number to text, and its web chat or site.
pub fn resource_lines(resources: &[Value]) -> Vec<String> {
    let mut lines = Vec::new();
    for r in resources {
        let name = r["name"].as_str().unwrap_or("Support line");
        let mut parts = Vec::new();
        if let Some(phone) = r["phone"].as_str().filter(|p| !dial_digits(p).is_empty()) {
            parts.push(format!(
                "<a href=\"tel:{}\">Call {}</a>",
                escape_attr(&dial_digits(phone)),
                escape(phone)
            ));
        }
        if let Some(text) = r["text"].as_str() {
            match r["text_keyword"].as_str() {
                Some(k) => parts.push(format!("text {} to {}", escape(k), escape(text))),
                None => parts.push(format!("text {}", escape(text))),
            }
        }
        if let Some(url) = r["chat_url"]
            .as_str()
            .filter(|u| safe_url(u))
            .or_else(|| r["url"].as_str().filter(|u| safe_url(u)))
        {
            parts.push(format!("<a href=\"{}\">website</a>", escape_attr(url)));
        }
        let hours = r["hours"]
            .as_str()
            .map(|h| format!(" ({})", escape(h)))
            .unwrap_or_default();
        lines.push(format!(
            "• <b>{}</b>{hours}: {}",
            escape(name),
            parts.join(" · ")
        ));
    }
    lines
}

/// A crisis reply as Telegram messages: the reply and all its resources
/// in one message whenever they fit (they always do for the reviewed
/// replies); otherwise the reply first, then the resources together in
/// one message, never cut apart.
pub fn crisis_messages(reply_markdown: &str, resources: &[Value]) -> Vec<String> {
    let mut tail = Vec::new();
    let lines = resource_lines(resources);
    if !lines.is_empty() {
        tail.push("<b>People you can reach now</b>".to_owned());
        tail.extend(lines);
    }
    tail.push(format!("<i>{}</i>", escape(EMERGENCY_LINE)));
    let tail = tail.join("\n");
    let body = markdown_to_html(reply_markdown);
    let whole = format!("{body}\n\n{tail}");
    if tg_len(&whole) <= MESSAGE_LIMIT {
        return vec![whole];
    }
    let mut out = split_message(reply_markdown, MESSAGE_LIMIT);
    out.push(tail);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that `html` uses only Telegram's tags, balanced and nested,
    /// and no raw `<`, `>` or `&` outside tags and the four entities.
    pub(crate) fn valid_html(html: &str) -> Result<(), String> {
        const TAGS: &[&str] = &["b", "i", "s", "u", "code", "pre", "a", "blockquote"];
        let mut stack: Vec<String> = Vec::new();
        let mut rest = html;
        while let Some(pos) = rest.find(['<', '>', '&']) {
            let (_, tail) = rest.split_at(pos);
            if tail.starts_with('>') {
                return Err(format!("raw > in {html:?}"));
            }
            if tail.starts_with('&') {
                let ok = ["&amp;", "&lt;", "&gt;", "&quot;"]
                    .iter()
                    .find(|e| tail.starts_with(*e));
                match ok {
                    Some(e) => {
                        rest = &tail[e.len()..];
                        continue;
                    }
                    None => return Err(format!("raw & in {html:?}")),
                }
            }
            let end = tail
                .find('>')
                .ok_or_else(|| format!("open tag in {html:?}"))?;
            let tag = &tail[1..end];
            if let Some(name) = tag.strip_prefix('/') {
                match stack.pop() {
                    Some(open) if open == name => {}
                    other => return Err(format!("</{name}> closes {other:?} in {html:?}")),
                }
            } else {
                let name = tag.split(' ').next().unwrap_or_default();
                if !TAGS.contains(&name) {
                    return Err(format!("tag {name} in {html:?}"));
                }
                let attrs = &tag[name.len()..];
                if attrs.contains('<') || attrs.matches('"').count() % 2 != 0 {
                    return Err(format!("bad attributes {attrs:?}"));
                }
                stack.push(name.to_owned());
            }
            rest = &tail[end + 1..];
        }
        if stack.is_empty() {
            Ok(())
        } else {
            Err(format!("unclosed {stack:?} in {html:?}"))
        }
    }

    #[test]
    fn markdown_converts_to_the_telegram_subset() {
        for (md, want) in [
            ("plain", "plain"),
            ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
            ("**bold** and *it*", "<b>bold</b> and <i>it</i>"),
            ("__bold__ _it_", "<b>bold</b> <i>it</i>"),
            ("snake_case_name stays", "snake_case_name stays"),
            ("~~gone~~", "<s>gone</s>"),
            ("`a<b>`", "<code>a&lt;b&gt;</code>"),
            ("**bold *nested***", "<b>bold <i>nested</i></b>"),
            (
                "[988](tel:988) [site](https://x.example/?a=1&b=\"2\")",
                "<a href=\"tel:988\">988</a> <a href=\"https://x.example/?a=1&amp;b=&quot;2&quot;\">site</a>",
            ),
            ("[bad](javascript:alert(1))", "[bad](javascript:alert(1))"),
            ("# Title", "<b>Title</b>"),
            ("- one\n- two", "• one\n• two"),
            ("1. one\n2. two", "1. one\n2. two"),
            ("> quoted <x>", "<blockquote>quoted &lt;x&gt;</blockquote>"),
            (
                "```rust\nlet a = 1 < 2;\n```",
                "<pre><code class=\"language-rust\">let a = 1 &lt; 2;</code></pre>",
            ),
            ("```\nx & y\n```", "<pre>x &amp; y</pre>"),
            ("para one\n\npara two", "para one\n\npara two"),
            ("an * alone and ** too", "an * alone and ** too"),
            ("unclosed **bold", "unclosed **bold"),
            ("2 * 3 * 4", "2 * 3 * 4"),
            ("\\*not italic\\*", "*not italic*"),
            ("it's \"quoted\"", "it's \"quoted\""),
        ] {
            let got = markdown_to_html(md);
            assert_eq!(got, want, "{md:?}");
            valid_html(&got).unwrap_or_else(|e| panic!("{md:?}: {e}"));
        }
    }

    #[test]
    fn the_checker_refuses_what_telegram_refuses() {
        for bad in [
            "<b>x",
            "</b>",
            "<b><i>x</b></i>",
            "a & b",
            "<div>x</div>",
            "&nbsp;",
        ] {
            assert!(valid_html(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn plain_text_undoes_the_markup() {
        assert_eq!(
            plain_text("<b>a</b> &lt;b&gt; &amp;amp; <a href=\"tel:1\">x</a>"),
            "a <b> &amp; x"
        );
    }

    fn sentence(i: usize) -> String {
        format!("Sentence {i} says **something** kind & true. ")
    }

    #[test]
    fn long_replies_split_in_order_at_boundaries_with_valid_html() {
        // 9,000+ characters in paragraphs of sentences.
        let paragraphs: Vec<String> = (0..30)
            .map(|p| (0..7).map(|s| sentence(p * 7 + s)).collect::<String>())
            .collect();
        let md = paragraphs.join("\n\n");
        assert!(md.chars().count() > 9000, "{}", md.len());
        let parts = split_message(&md, MESSAGE_LIMIT);
        assert!(parts.len() >= 3, "{}", parts.len());
        for p in &parts {
            assert!(tg_len(p) <= MESSAGE_LIMIT);
            valid_html(p).unwrap();
            // Cut between paragraphs: every message ends a sentence.
            assert!(p.trim_end().ends_with('.'), "{}", &p[p.len() - 20..]);
        }
        // Nothing lost, nothing repeated, in order.
        let joined = plain_text(&parts.join("\n\n"));
        let want = plain_text(&markdown_to_html(&md));
        assert_eq!(joined, want);
    }

    #[test]
    fn one_huge_paragraph_splits_between_sentences_then_words_then_characters() {
        let para: String = (0..300).map(sentence).collect();
        let parts = split_message(&para, 1000);
        assert!(parts.len() > 1);
        for p in &parts {
            assert!(tg_len(p) <= 1000);
            valid_html(p).unwrap();
            assert!(p.ends_with('.'), "{p}");
        }
        let words_only = "word ".repeat(1000);
        let parts = split_message(&words_only, 300);
        for p in &parts {
            assert!(tg_len(p) <= 300 && p.ends_with("word"), "{p}");
        }
        let one_word = "x".repeat(2500);
        let parts = split_message(&one_word, 1000);
        assert_eq!(parts.concat(), one_word);
        assert!(parts.iter().all(|p| tg_len(p) <= 1000));
        // Escapes are never cut: each `&` becomes a whole `&amp;`.
        let amps = "&".repeat(900);
        for p in split_message(&amps, 1000) {
            assert!(tg_len(&p) <= 1000);
            valid_html(&p).unwrap();
        }
        // Emoji count as two UTF-16 units.
        let emoji = "😔".repeat(700);
        for p in split_message(&emoji, 1000) {
            assert!(tg_len(&p) <= 1000);
        }
    }

    #[test]
    fn long_code_blocks_split_between_lines_each_wrapped() {
        let code: String = (0..200).map(|i| format!("let x{i} = {i} < 1;\n")).collect();
        let md = format!("```rust\n{code}```");
        let parts = split_message(&md, 1000);
        assert!(parts.len() > 1);
        for p in &parts {
            assert!(p.starts_with("<pre><code class=\"language-rust\">"), "{p}");
            valid_html(p).unwrap();
            assert!(tg_len(p) <= 1000);
        }
    }

    #[test]
    fn crisis_messages_keep_resources_with_tel_links_in_one_message() {
        let resources = vec![
            serde_json::json!({"name": "988 Suicide & Crisis Lifeline", "phone": "988",
                "text": "988", "url": "https://988lifeline.org", "hours": "24/7"}),
            serde_json::json!({"name": "Samaritans", "phone": "116 123",
                "url": "https://www.samaritans.org"}),
        ];
        let msgs = crisis_messages("I'm really glad you told me. **You matter.**", &resources);
        assert_eq!(msgs.len(), 1);
        let m = &msgs[0];
        valid_html(m).unwrap();
        assert!(m.contains("<a href=\"tel:988\">Call 988</a>"), "{m}");
        assert!(m.contains("<a href=\"tel:116123\">Call 116 123</a>"), "{m}");
        assert!(m.contains("988 Suicide &amp; Crisis Lifeline"), "{m}");
        assert!(m.contains(EMERGENCY_LINE));
        // A reply too long for one message still keeps the resources together.
        let long = "I hear you. ".repeat(400);
        let msgs = crisis_messages(&long, &resources);
        let last = msgs.last().unwrap();
        assert!(last.contains("Call 988") && last.contains("Call 116 123"));
        assert!(msgs[..msgs.len() - 1].iter().all(|m| !m.contains("tel:")));
    }

    #[test]
    fn dial_digits_keep_a_leading_plus() {
        assert_eq!(dial_digits("+44 (0) 116-123"), "+440116123");
        assert_eq!(dial_digits("988"), "988");
        assert_eq!(dial_digits("call 1+2"), "12");
    }
}
