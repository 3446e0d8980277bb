//! The man page and the shell completions, made from the launcher's own argument
//! definitions (`args.rs`) and the variable table (`config::VARIABLES`), so that they can't
//! drift from what the launcher accepts. `make install` and `make deb` run
//! `dropbehind --generate man|bash|zsh|fish`; the option is not part of the definitions
//! (it would show up in the completions it writes).

use crate::args::Cli;
use clap::CommandFactory;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};
use dropbehind_core::config;
use std::io::Write;

pub const GENERATE: &str = "--generate";

/// Writes the man page or a completion script for `what` to `w`.
pub fn generate(what: &str, w: &mut dyn Write) -> Result<(), String> {
    let shell = match what {
        "man" => return man_page(w).map_err(|e| e.to_string()),
        "bash" => clap_complete::Shell::Bash,
        "zsh" => clap_complete::Shell::Zsh,
        "fish" => clap_complete::Shell::Fish,
        _ => {
            return Err(format!(
                "{GENERATE} {what:?}: expected man, bash, zsh or fish"
            ));
        }
    };
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "dropbehind", w);
    Ok(())
}

/// A section of `cmd`'s page rendered by clap_mangen, without its `.SH` heading.
fn body(render: impl Fn(&mut Vec<u8>) -> std::io::Result<()>) -> std::io::Result<String> {
    let mut v = Vec::new();
    render(&mut v)?;
    Ok(String::from_utf8_lossy(&v)
        .lines()
        .filter(|l| !l.starts_with(".SH "))
        .map(|l| format!("{l}\n"))
        .collect())
}

const EXAMPLES: &[(&str, &str)] = &[
    (
        "dropbehind -- cp big.iso /backup/",
        "Copy without pushing the rest of the page cache out.",
    ),
    (
        "dropbehind --stats-format json -- tar cf /backup/x.tar /data",
        "The same for tar, with a report per process, as JSON, at exit.",
    ),
    (
        "dropbehind stat -r --top 10 /var/lib",
        "The ten files with most pages cached under /var/lib, and the total.",
    ),
    (
        "dropbehind stat --map /backup/x.tar",
        "Where in the file its cached pages are.",
    ),
    (
        "dropbehind evict -r /backup",
        "Drop what is cached of a tree (clean pages only).",
    ),
    (
        "dropbehind env --stats >/etc/dropbehind.env",
        "An environment file for systemd's EnvironmentFile= (see the README for a unit drop-in and a crontab line).",
    ),
];

fn man_page(w: &mut dyn Write) -> std::io::Result<()> {
    let mut cmd = Cli::command();
    cmd.build();
    let man = Man::new(cmd.clone()).manual("User Commands");
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    man.render_options_section(w)?;

    let mut r = Roff::new();
    r.control("SH", ["COMMANDS"]);
    r.to_writer(w)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("dropbehind {}", sub.get_name());
        let mut r = Roff::new();
        r.control("SS", [name.as_str()]);
        r.to_writer(w)?;
        let m = Man::new(sub.clone().bin_name(&name));
        w.write_all(body(|v| m.render_synopsis_section(v))?.as_bytes())?;
        w.write_all(b".PP\n")?;
        w.write_all(body(|v| m.render_description_section(v))?.as_bytes())?;
        w.write_all(body(|v| m.render_options_section(v))?.as_bytes())?;
    }

    let mut r = Roff::new();
    r.control("SH", ["ENVIRONMENT"]);
    r.text([roman(
        "The launcher's options set these for the command; a bad value is refused by the launcher (exit status 2) and, in the library, warned about once and replaced by the default.",
    )]);
    for v in config::VARIABLES {
        r.control("TP", []);
        r.text([bold(v.name)]);
        r.text([roman(format!("{} [default: {}]", v.accepts, v.default))]);
    }
    r.control("TP", []);
    r.text([bold("DROPBEHIND_LIB")]);
    r.text([roman(crate::args::LIB_HELP)]);

    r.control("SH", ["EXIT STATUS"]);
    r.text([roman(
        "With a command: the command's own exit status; 127 when it does not exist, 126 when it can't be run, 2 for a bad option or variable (named in a one-line message). stat and evict: 0, or 1 when a path was missing or unreadable (after the rest was done), or 2 for a bad option. env: 0, or 2.",
    )]);

    r.control("SH", ["EXAMPLES"]);
    for (command, what) in EXAMPLES {
        r.control("TP", []);
        r.text([bold(*command)]);
        r.text([roman(*what)]);
    }

    r.control("SH", ["NOTES"]);
    r.text([roman(
        "Statically linked programs (most Go binaries), setuid programs, raw syscalls and io_uring bypass any LD_PRELOAD library; the launcher warns about the first two. Residency comes from cachestat(2) (Linux 6.5 and later), which refuses files the caller may not write: stat says \"unknown\" there. On xfs on a slow device, a program holding CAP_SYS_ADMIN (and under no seccomp filter) has a cold directory's inodes read by number with xfs's bulkstat, which waits for none of the directory's locks; any other program, by lookups. With --stats on stderr, the reports of the program's processes are gathered in a file under $TMPDIR and printed by the launcher when the program ends (a program may close its own stderr before it exits, as GNU tar does); with --no-watch, or with DROPBEHIND_STATS=1 set by hand, each process writes its report on its own stderr at exit, as does a process that changed user since (it may not write into the launcher's directory). Files the caller may not write are read uncached (RWF_DONTCACHE) only by reads that start and end on multiples of the largest folio readahead makes (twice the device's read_ahead_kb, at most 2 MiB): the kernel would read other reads' last folios twice, so those are left cached.",
    )]);

    r.control("SH", ["SEE ALSO"]);
    let see = [
        ("vmtouch", "8"),
        ("fincore", "1"),
        ("nocache", "1"),
        ("cachestat", "2"),
        ("posix_fadvise", "2"),
        ("systemd.exec", "5"),
        ("crontab", "5"),
    ];
    let mut line = Vec::new();
    for (i, (page, section)) in see.iter().enumerate() {
        if i > 0 {
            line.push(roman(", "));
        }
        line.push(bold(*page));
        line.push(roman(format!("({section})")));
    }
    r.text(line);
    r.to_writer(w)?;
    man.render_version_section(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_names_every_option_and_variable() {
        let mut v = Vec::new();
        generate("man", &mut v).unwrap();
        let page = String::from_utf8(v).unwrap();
        for needle in [
            ".TH dropbehind 1",
            "\\-\\-window",
            "\\-\\-stats\\-format",
            "dropbehind stat",
            "\\-\\-one\\-file\\-system",
            "dropbehind evict",
            "dropbehind env",
            "DROPBEHIND_STATS_FORMAT",
        ] {
            assert!(page.contains(needle), "{needle} missing");
        }
        assert!(!page.contains(GENERATE));
    }

    #[test]
    fn completions_for_each_shell() {
        for shell in ["bash", "zsh", "fish"] {
            let mut v = Vec::new();
            generate(shell, &mut v).unwrap();
            let s = String::from_utf8(v).unwrap();
            assert!(
                s.contains("dereference") && s.contains("stats-format"),
                "{shell}"
            );
        }
        assert!(generate("tcsh", &mut Vec::new()).is_err());
    }
}
