//! Polling under a deadline.
//!
//! Tests wait for background work (deliveries, retries, dead-lettering) by
//! polling what the node or the receiver reports, never by sleeping a fixed
//! time and hoping. A timeout panics with what was awaited and, for
//! [`wait_for`], the last state observed.

use std::time::{Duration, Instant};

/// Default pause between two polls.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Polls `check` every `poll_interval` until it returns true; panics after
/// `deadline` with `what` in the message.
pub async fn eventually<F>(deadline: Duration, poll_interval: Duration, what: &str, mut check: F)
where
    F: AsyncFnMut() -> bool,
{
    wait_for(deadline, poll_interval, what, async || if check().await { Ok(()) } else { Err(String::new()) }).await
}

/// Polls `check` every `poll_interval` until it returns `Ok(value)`, and
/// returns that value. `Err(state)` describes what was seen instead; after
/// `deadline` the panic message shows the last such description.
pub async fn wait_for<T, F>(deadline: Duration, poll_interval: Duration, what: &str, mut check: F) -> T
where
    F: AsyncFnMut() -> Result<T, String>,
{
    let started = Instant::now();
    loop {
        let last = match check().await {
            Ok(value) => return value,
            Err(state) => state,
        };
        if started.elapsed() >= deadline {
            let last = if last.is_empty() { String::new() } else { format!("; last seen: {last}") };
            panic!("timed out after {:.1} s waiting for {what}{last}", deadline.as_secs_f64());
        }
        tokio::time::sleep(poll_interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_for_returns_the_value_once_the_check_passes() {
        let mut polls = 0;
        let value = wait_for(Duration::from_secs(5), Duration::from_millis(1), "three polls", async || {
            polls += 1;
            if polls == 3 { Ok(polls * 10) } else { Err(format!("poll {polls}")) }
        })
        .await;
        assert_eq!(value, 30);
    }

    #[tokio::test]
    #[should_panic(expected = "waiting for the impossible; last seen: still false")]
    async fn wait_for_panics_with_the_last_state_after_the_deadline() {
        wait_for(Duration::from_millis(30), Duration::from_millis(5), "the impossible", async || {
            Err::<(), _>("still false".to_owned())
        })
        .await;
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 0.0 s waiting for never")]
    async fn eventually_panics_with_its_description() {
        eventually(Duration::from_millis(20), Duration::from_millis(5), "never", async || false).await;
    }
}
