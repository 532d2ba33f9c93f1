//! Resident memory and CPU time of a node process, from Linux's `/proc`.
//! Elsewhere every reading is `None` and the report says so.

use std::time::Duration;

/// Clock ticks per second of `/proc/<pid>/stat` times (`getconf CLK_TCK`;
/// 100 on every Linux this runs on).
const CLOCK_TICKS_PER_S: u64 = 100;

/// One reading of one process.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub rss_bytes: u64,
    /// The peak resident set so far (`VmHWM`).
    pub rss_peak_bytes: u64,
    /// User plus system CPU time so far.
    pub cpu: Duration,
}

/// Reads `pid`'s memory and CPU time.
pub fn sample(pid: u32) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(Sample {
        rss_bytes: status_kib(&status, "VmRSS:")? * 1024,
        rss_peak_bytes: status_kib(&status, "VmHWM:")? * 1024,
        cpu: cpu_time(&stat)?,
    })
}

/// The value of a `Name:   123 kB` line of `/proc/<pid>/status`.
fn status_kib(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

/// utime + stime of `/proc/<pid>/stat` (fields 14 and 15, counted after
/// the parenthesized command name, which may itself hold spaces).
fn cpu_time(stat: &str) -> Option<Duration> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // `after_name` starts at field 3 (state), so field n is at index n - 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 1000 / CLOCK_TICKS_PER_S))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_a_command_name_with_spaces() {
        let stat = "42 (my node) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1 2 3";
        assert_eq!(cpu_time(stat), Some(Duration::from_millis(3000)));
    }

    #[test]
    fn status_values_are_read_in_kib() {
        let status = "Name:\thookraft\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(1024));
        assert_eq!(status_kib(status, "VmHWM:"), Some(2048));
        assert_eq!(status_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn this_process_can_be_sampled_on_linux() {
        if cfg!(target_os = "linux") {
            let sample = sample(std::process::id()).expect("a readable /proc");
            assert!(sample.rss_bytes > 0 && sample.rss_peak_bytes >= sample.rss_bytes);
        }
    }
}
