//! Human units in the config and on the command line: byte sizes ("8GiB", "512MiB",
//! "unlimited", read by `parse-size`) and durations ("20ms", "2s", read by `humantime`).
//!
//! A bare `K`, `M`, `G`, `T`, `P` or `E` is a binary unit here, as in nvidia-smi's figures and
//! Slurm's `--mem=16G`, where `parse-size` reads it as decimal (a cap written `16G` would
//! silently shrink by 7%): it is read as `Ki`, `Mi`, `Gi`, `Ti`, `Pi` or `Ei`.

use std::time::Duration;

/// Parses a byte size. Binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB, TB) suffixes in any
/// case, `K`/`M`/`G`/`T` alone as binary, a bare number as bytes, and "unlimited"/"none" as
/// `None`.
pub fn parse_bytes(text: &str) -> Result<Option<u64>, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let binary = match t.char_indices().last() {
        Some((i, unit))
            if "kKmMgGtTpPeE".contains(unit)
                && t[..i]
                    .trim_end()
                    .ends_with(|c: char| c.is_ascii_digit() || c == '.') =>
        {
            Some(format!("{}{unit}i", &t[..i]))
        }
        _ => None,
    };
    parse_size::parse_size(binary.as_deref().unwrap_or(t))
        .map(Some)
        .map_err(|e| {
            format!(
                "{text:?} is not a size ({e}; use a number with B, KiB, MiB, GiB, TiB, KB, MB, \
                 GB or TB, for example \"8GiB\", or \"unlimited\")"
            )
        })
}

/// Formats a byte count the way `parse_bytes` reads it back, using the largest exact binary unit
/// or one decimal place.
pub fn format_bytes(bytes: Option<u64>) -> String {
    let Some(b) = bytes else {
        return "unlimited".into();
    };
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, size) in UNITS {
        if b >= size {
            return if b % size == 0 {
                format!("{}{name}", b / size)
            } else {
                format!("{:.1}{name}", b as f64 / size as f64)
            };
        }
    }
    format!("{b}B")
}

/// Parses a duration as `humantime` does: whole numbers with units (`ns`, `us`, `ms`, `s`,
/// `min`, `h`, ...), several of them summed ("1s 500ms").
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!("{text:?} is not a duration ({e}; examples: \"20ms\", \"2s\", \"1s 500ms\")")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("8GiB"), Ok(Some(8 << 30)));
        assert_eq!(parse_bytes("512 MiB"), Ok(Some(512 << 20)));
        assert_eq!(parse_bytes("1.5G"), Ok(Some(3 << 29)));
        assert_eq!(parse_bytes("2GB"), Ok(Some(2_000_000_000)));
        assert_eq!(parse_bytes("4096"), Ok(Some(4096)));
        assert_eq!(parse_bytes("unlimited"), Ok(None));
        assert_eq!(parse_bytes("16G"), Ok(Some(16 << 30)), "a bare G is binary");
        assert_eq!(parse_bytes("16 g"), Ok(Some(16 << 30)));
        assert_eq!(parse_bytes("2k"), Ok(Some(2048)));
        assert_eq!(parse_bytes("3T"), Ok(Some(3 << 40)));
        assert_eq!(parse_bytes("2gib"), Ok(Some(2 << 30)));
        assert_eq!(parse_bytes("2 KB"), Ok(Some(2_000)));
        assert_eq!(parse_bytes("10B"), Ok(Some(10)));
        assert_eq!(parse_bytes("none"), Ok(None));
        assert!(parse_bytes("8 parsecs")
            .unwrap_err()
            .contains("is not a size"));
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("G").is_err());
        assert!(parse_bytes("GiB").is_err());
        assert!(parse_bytes("-1GiB").is_err());
    }

    #[test]
    fn sizes_round_trip_through_format() {
        for b in [0, 1, 1023, 1024, 4 << 30, 3 << 29, 5 << 40] {
            let s = format_bytes(Some(b));
            let back = parse_bytes(&s).unwrap().unwrap();
            let err = (back as f64 - b as f64).abs() / (b.max(1) as f64);
            assert!(err < 0.05, "{b} -> {s} -> {back}");
        }
        assert_eq!(format_bytes(Some(8 << 30)), "8GiB");
        assert_eq!(format_bytes(None), "unlimited");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("20ms"), Ok(Duration::from_millis(20)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_duration("1min"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1s 500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("20").unwrap_err().contains("not a duration"));
        assert!(parse_duration("fast").is_err());
    }
}
