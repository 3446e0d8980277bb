//! What kind of program a binary is, from its ELF headers: static (no PT_INTERP) or Go
//! (a `.go.buildinfo` section): programs whose I/O never goes through glibc's functions.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Dynamically linked C (or the like): the preload can act there.
    Dynamic,
    Static,
    /// A Go program: Go makes its own syscalls, linked dynamically or not.
    Go,
    /// Not a 64-bit little-endian ELF (a script), or unreadable.
    Other,
}

impl Kind {
    pub fn reachable_by_preload(self) -> bool {
        matches!(self, Kind::Dynamic | Kind::Other)
    }
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Dynamic => "dynamically linked",
            Kind::Static => "a static binary",
            Kind::Go => "a Go program",
            Kind::Other => "not an ELF binary",
        }
    }
}

pub fn kind(path: &Path) -> Kind {
    let Ok(mut f) = std::fs::File::open(path) else {
        return Kind::Other;
    };
    let mut head = [0u8; 64];
    if f.read_exact(&mut head).is_err() {
        return Kind::Other;
    }
    let Some(is_static) = elf_is_static(&read_head(&mut f).unwrap_or_default()) else {
        return Kind::Other;
    };
    if has_go_section(&mut f, &head).unwrap_or(false) {
        return Kind::Go;
    }
    if is_static {
        Kind::Static
    } else {
        Kind::Dynamic
    }
}

fn read_head(f: &mut std::fs::File) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    f.seek(SeekFrom::Start(0)).ok()?;
    f.by_ref().take(64 * 1024).read_to_end(&mut head).ok()?;
    Some(head)
}

/// Whether the section headers name `.go.buildinfo` (or `.note.go.buildid`).
fn has_go_section(f: &mut std::fs::File, h: &[u8; 64]) -> Option<bool> {
    let u16_at = |b: &[u8], o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |b: &[u8], o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |b: &[u8], o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let shoff = u64_at(h, 0x28)?;
    let shentsize = u16_at(h, 0x3a)? as u64;
    let shnum = u16_at(h, 0x3c)? as u64;
    let shstrndx = u16_at(h, 0x3e)? as u64;
    if shoff == 0 || shentsize < 64 || shnum == 0 || shnum > 4096 || shstrndx >= shnum {
        return Some(false);
    }
    let mut sh = vec![0u8; (shentsize * shnum) as usize];
    f.seek(SeekFrom::Start(shoff)).ok()?;
    f.read_exact(&mut sh).ok()?;
    let str_hdr = (shstrndx * shentsize) as usize;
    let str_off = u64_at(&sh, str_hdr + 0x18)?;
    let str_size = u64_at(&sh, str_hdr + 0x20)?.min(1 << 20);
    let mut names = vec![0u8; str_size as usize];
    f.seek(SeekFrom::Start(str_off)).ok()?;
    f.read_exact(&mut names).ok()?;
    for i in 0..shnum {
        let name_off = u32_at(&sh, (i * shentsize) as usize)? as usize;
        let name = names.get(name_off..)?;
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        if name == b".go.buildinfo" || name == b".note.go.buildid" {
            return Some(true);
        }
    }
    Some(false)
}

/// For a 64-bit little-endian ELF executable: true when it has no PT_INTERP (static).
/// None when the file is not such an ELF (a script, say) or its headers are out of reach.
pub fn elf_is_static(b: &[u8]) -> Option<bool> {
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let phoff = u64_at(0x20)? as usize;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    const PT_INTERP: u32 = 3;
    let mut any = false;
    for i in 0..phnum {
        let t = u32_at(phoff + i * phentsize)?;
        any = true;
        if t == PT_INTERP {
            return Some(false);
        }
    }
    any.then_some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_detection() {
        let ls = std::fs::read("/bin/ls").unwrap();
        assert_eq!(elf_is_static(&ls), Some(false));
        assert_eq!(elf_is_static(b"#!/bin/sh\necho hi\n"), None);
    }

    #[test]
    fn ls_is_dynamic_and_a_script_is_other() {
        assert_eq!(kind(Path::new("/bin/ls")), Kind::Dynamic);
        assert_eq!(kind(Path::new("/nonexistent")), Kind::Other);
    }

    #[test]
    fn go_programs_are_recognised_where_installed() {
        for p in ["/usr/bin/restic", "/usr/bin/rclone"] {
            if Path::new(p).exists() {
                assert_eq!(kind(Path::new(p)), Kind::Go, "{p}");
            }
        }
    }
}
