//! Resident memory and CPU time of a node process, and how the whole
//! machine's CPU time was spent, from Linux's `/proc`. Elsewhere every
//! reading is `None` and the report says so.

use std::time::Duration;

use crate::report::MachineUsage;

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

/// The resident memory of process `pid`, if any, in MiB.
pub fn rss_mib(pid: Option<u32>) -> Option<f64> {
    pid.and_then(sample).map(|s| s.rss_bytes as f64 / crate::MIB)
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

/// The whole machine's CPU time so far, all cores together, in clock
/// ticks: the `cpu` line of `/proc/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineTicks {
    /// Running anything: user, nice, system, irq and softirq time.
    pub busy: u64,
    /// Idle, or idle waiting for IO.
    pub idle: u64,
    /// Time the hypervisor gave this virtual machine's cores to someone
    /// else: on a shared host, the reason the same run is slower one hour
    /// than the next.
    pub steal: u64,
    /// The number of cores the times add up over.
    pub cores: u64,
}

/// Reads the machine's CPU times.
pub fn machine() -> Option<MachineTicks> {
    machine_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Parses `/proc/stat`: the aggregate `cpu` line (user nice system idle
/// iowait irq softirq steal ...; guest time is already inside user) and
/// one `cpuN` line per core.
fn machine_ticks(stat: &str) -> Option<MachineTicks> {
    let line = stat.lines().find(|l| l.split_whitespace().next() == Some("cpu"))?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    let cores =
        stat.lines().filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit)).count();
    Some(MachineTicks {
        busy: field(0) + field(1) + field(2) + field(5) + field(6),
        idle: field(3) + field(4),
        steal: field(7),
        cores: u64::try_from(cores).ok().filter(|&c| c > 0)?,
    })
}

impl MachineTicks {
    /// How the cores spent the time between `self` and the later reading
    /// `later`; `None` when no time passed between them.
    pub fn usage_until(&self, later: &MachineTicks) -> Option<MachineUsage> {
        let busy = later.busy.saturating_sub(self.busy);
        let idle = later.idle.saturating_sub(self.idle);
        let steal = later.steal.saturating_sub(self.steal);
        let total = busy + idle + steal;
        if total == 0 {
            return None;
        }
        let percent = |part: u64| (part as f64 / total as f64) * 100.0 * later.cores as f64;
        Some(MachineUsage {
            cores: later.cores,
            busy_percent: percent(busy),
            idle_percent: percent(idle),
            steal_percent: percent(steal),
        })
    }
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

    const PROC_STAT: &str = "cpu  1000 10 200 5000 100 5 15 300 40 0\n\
                             cpu0 500 5 100 2500 50 2 8 150 20 0\n\
                             cpu1 500 5 100 2500 50 3 7 150 20 0\n\
                             intr 123 0 0\n\
                             ctxt 456\n";

    #[test]
    fn machine_times_are_read_from_the_aggregate_line_and_cores_counted() {
        let ticks = machine_ticks(PROC_STAT).expect("parses");
        assert_eq!(ticks, MachineTicks { busy: 1000 + 10 + 200 + 5 + 15, idle: 5000 + 100, steal: 300, cores: 2 });
    }

    #[test]
    fn shares_are_percent_of_one_core_over_the_stretch() {
        let start = MachineTicks { busy: 1000, idle: 1000, steal: 100, cores: 2 };
        // 200 ticks passed: 100 busy, 50 idle, 50 stolen.
        let end = MachineTicks { busy: 1100, idle: 1050, steal: 150, cores: 2 };
        let usage = start.usage_until(&end).expect("time passed");
        assert_eq!(usage, MachineUsage { cores: 2, busy_percent: 100.0, idle_percent: 50.0, steal_percent: 50.0 });
        assert_eq!(start.usage_until(&start), None);
    }

    #[test]
    fn a_stat_without_the_cpu_line_reads_as_nothing() {
        assert_eq!(machine_ticks("intr 1\nctxt 2\n"), None);
        assert_eq!(machine_ticks("cpu  1 2 x 4\ncpu0 1 2 3 4\n"), None);
    }

    #[test]
    fn this_process_can_be_sampled_on_linux() {
        if cfg!(target_os = "linux") {
            let sample = sample(std::process::id()).expect("a readable /proc");
            assert!(sample.rss_bytes > 0 && sample.rss_peak_bytes >= sample.rss_bytes);
            assert!(machine().is_some_and(|m| m.cores >= 1 && m.busy > 0), "a readable /proc/stat");
        }
    }
}
