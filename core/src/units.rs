//! Sizes: the binary units, and how sizes are read and written for people.

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub const GIB: u64 = 1024 * MIB;
/// The page size the policy reasons in (x86_64 and aarch64 Linux with 4 KiB pages).
pub const PAGE: u64 = 4096;

/// Parses `4096`, `64K`, `8M`, `1G`, `2T` (binary units; an optional trailing `B` or `iB`).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let mult = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => KIB,
        "M" | "MB" | "MIB" => MIB,
        "G" | "GB" | "GIB" => GIB,
        "T" | "TB" | "TIB" => 1024 * GIB,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Human form of a byte count: `8M`, `1.5G`, `4096`.
pub fn format_size(n: u64) -> String {
    for (unit, size) in [("G", GIB), ("M", MIB), ("K", KIB)] {
        if n >= size {
            return if n.is_multiple_of(size) {
                format!("{}{}", n / size, unit)
            } else {
                format!("{:.1}{}", n as f64 / size as f64, unit)
            };
        }
    }
    n.to_string()
}
