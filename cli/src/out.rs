//! Output shared by the tools: JSON strings, one-line errors, a buffered stdout that stops
//! quietly when its reader goes away.

use std::io::Write;
use std::process::ExitCode;

pub fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out += "\\\"",
            '\\' => out += "\\\\",
            c if (c as u32) < 0x20 => out += &format!("\\u{:04x}", c as u32),
            c => out.push(c),
        }
    }
    out + "\""
}

/// `null`, or the number.
pub fn json_opt(n: Option<u64>) -> String {
    n.map_or("null".into(), |n| n.to_string())
}

/// One `dropbehind:` line on stderr, and the exit status.
pub fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("dropbehind: {msg}");
    ExitCode::from(code)
}

/// A clap error as one line: what is wrong and the option or value it is about, without
/// the usage and tips clap adds on the lines after.
pub fn one_line(rendered: &str) -> String {
    let mut parts = Vec::new();
    for line in rendered.lines() {
        let line = line.trim();
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if line.is_empty() || line.starts_with("tip:") || line.starts_with("note:") {
            continue;
        }
        parts.push(line.strip_prefix("error: ").unwrap_or(line));
    }
    parts.join(" ")
}

/// Buffered stdout. A write that fails (the reader went away: `| head`) stops the output;
/// the tools then end their walk early and say nothing more.
pub struct Out {
    w: std::io::BufWriter<std::io::Stdout>,
    pub broken: bool,
}

impl Out {
    pub fn new() -> Out {
        Out {
            w: std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout()),
            broken: false,
        }
    }

    pub fn line(&mut self, s: &str) {
        if !self.broken && writeln!(self.w, "{s}").is_err() {
            self.broken = true;
        }
    }

    pub fn flush(&mut self) {
        if !self.broken && self.w.flush().is_err() {
            self.broken = true;
        }
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        self.flush();
    }
}

/// A JSON array written a record a line as records come: each line but the last ends
/// with a comma.
pub struct JsonArray {
    pending: Option<String>,
}

impl JsonArray {
    pub fn start(out: &mut Out) -> JsonArray {
        out.line("[");
        JsonArray { pending: None }
    }

    pub fn push(&mut self, out: &mut Out, record: String) {
        if let Some(p) = self.pending.replace(record) {
            out.line(&format!("{p},"));
        }
    }

    pub fn end(mut self, out: &mut Out) {
        if let Some(p) = self.pending.take() {
            out.line(&p);
        }
        out.line("]");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escaping() {
        assert_eq!(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }

    #[test]
    fn clap_errors_become_one_line() {
        let e = "error: unexpected argument '--bogus' found\n\n  tip: to pass '--bogus' as a value, use '-- --bogus'\n\nUsage: dropbehind stat [OPTIONS] <PATH>...\n\nFor more information, try '--help'.\n";
        assert_eq!(one_line(e), "unexpected argument '--bogus' found");
        let e = "error: the following required arguments were not provided:\n  <PATH>...\n\nUsage: dropbehind stat <PATH>...\n";
        assert_eq!(
            one_line(e),
            "the following required arguments were not provided: <PATH>..."
        );
    }
}
