//! `--stats` on stderr while the launcher watches: the reports gathered in a file.

use dropbehind_core::config;
use std::path::PathBuf;

/// The exit reports of `--stats` (on stderr), gathered while the program runs and printed
/// on the launcher's stderr when it ends. A program may close its own stderr before it
/// exits (GNU tar does, at the end of main), and then a report written there at exit is
/// lost; a file is still there. The file is in a directory of its own, removed after: a
/// process that outlives the launcher then finds no directory, and leaves no file behind.
pub struct Reports {
    dir: PathBuf,
    pub file: PathBuf,
}

impl Reports {
    /// None when no directory can be made: the reports then go to stderr as asked.
    pub fn create() -> Option<Reports> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        // The library takes only an absolute path (a relative TMPDIR would name another
        // file in each process's own directory).
        if !base.is_absolute() {
            return None;
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        for attempt in 0..8u32 {
            let dir = base.join(format!(
                "{}{}-{:08x}",
                config::GATHERED_DIR_PREFIX,
                std::process::id(),
                nanos.wrapping_add(attempt)
            ));
            if std::fs::DirBuilder::new().mode(0o700).create(&dir).is_ok() {
                let file = dir.join(config::GATHERED_FILE);
                return Some(Reports { dir, file });
            }
        }
        None
    }

    /// Prints what the program's processes reported, then removes the file.
    pub fn print(self) {
        if let Ok(text) = std::fs::read(&self.file) {
            use std::io::Write;
            let _ = std::io::stderr().write_all(&text);
        }
    }
}

impl Drop for Reports {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_dir(&self.dir);
    }
}
