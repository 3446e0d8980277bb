//! `dropbehind env [OPTIONS]`: the environment that preloads the library, as NAME=value
//! lines for a systemd EnvironmentFile=, a crontab, docker's --env-file or `env -i`.

use crate::args::EnvArgs;
use crate::launch::{find_library, not_found, settings};
use crate::out::{Out, fail};
use dropbehind_core::config;
use std::process::ExitCode;

/// Why `value` can't be written so that systemd, cron and docker all read it back as it
/// is: they differ in how they treat quotes, backslashes, `$` and spaces (docker keeps
/// quotes; systemd and cron strip them), and none takes a newline.
fn unportable(value: &str) -> Option<&'static str> {
    if value.chars().any(|c| c.is_control()) {
        Some("a control character or newline")
    } else if value.chars().any(|c| c.is_whitespace()) {
        Some("a space")
    } else if value.contains(['"', '\'', '\\', '$', '`']) {
        Some("a quote, backslash, $ or `")
    } else {
        None
    }
}

/// The lines, LD_PRELOAD first, then the variables in table order: each option's value,
/// else the value already in the environment (checked like the options).
pub fn lines(args: &EnvArgs) -> Result<Vec<String>, String> {
    let from_options = settings(&args.preload)?;
    let lib = find_library().map_err(|looked| not_found(&looked))?;
    let lib = lib.to_string_lossy().into_owned();
    let mut out = Vec::new();
    let mut push = |name: &str, value: &str| match unportable(value) {
        Some(what) => Err(format!(
            "{name}={value:?} holds {what}, which EnvironmentFile=, cron and docker read differently"
        )),
        None => {
            out.push(format!("{name}={value}"));
            Ok(())
        }
    };
    push("LD_PRELOAD", &lib)?;
    for v in config::VARIABLES {
        let value = from_options
            .iter()
            .find(|(n, _)| *n == v.name)
            .map(|(_, value)| value.clone())
            .or_else(|| std::env::var(v.name).ok());
        if let Some(value) = value {
            push(v.name, &value)?;
        }
    }
    Ok(out)
}

pub fn run(args: &EnvArgs) -> ExitCode {
    match lines(args) {
        Ok(lines) => {
            let mut out = Out::new();
            for l in lines {
                out.line(&l);
            }
            out.flush();
            if out.broken {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => fail(2, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_every_reader_takes_alike() {
        assert_eq!(
            unportable("/usr/lib/x86_64-linux-gnu/libdropbehind.so"),
            None
        );
        assert_eq!(unportable("/var/lib/mysql/*:*.db"), None);
        assert!(unportable("/my files/*").is_some());
        assert!(unportable("/a\nb").is_some());
        assert!(unportable("/$HOME/*").is_some());
    }
}
