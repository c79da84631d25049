//! Formatting helpers shared by the commands.

use std::time::Duration;

/// A byte count with a binary unit, e.g. `4.0 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

/// A duration with a readable unit, e.g. `12.3 µs`.
pub fn duration(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_well() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(4 << 20), "4.0 MiB");
        assert_eq!(duration(Duration::from_nanos(56)), "56 ns");
        assert_eq!(duration(Duration::from_micros(12)), "12.0 µs");
        assert_eq!(duration(Duration::from_millis(3)), "3.00 ms");
    }
}
