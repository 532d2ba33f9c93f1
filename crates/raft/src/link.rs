//! How nodes prove to each other that they hold the cluster secret,
//! without ever sending it.
//!
//! Every node-to-node request carries [`LINK_HEADER`]:
//! `v1 <from> <to> <time ms> <boot> <seq> <mac>`, where `mac` is
//! HMAC-SHA256, under a key derived from the cluster secret
//! ([`LinkKey::derive`]), of those fields, the request path and the whole
//! body. The receiver checks that the request is addressed to it (`to`),
//! that its time is within [`LINK_SKEW_MS`] of its own clock, that the MAC
//! matches (in constant time) and that the pair `(boot, seq)` was not seen
//! before ([`ReplayGuard`]: `boot` is drawn at random when the sender
//! starts, `seq` counts its requests). Each `200` reply carries
//! [`LINK_REPLY_HEADER`]: the MAC of the request's `(from, to, boot,
//! seq)`, the status and the reply body, so the sender knows the answer
//! came from a holder of the secret too.
//!
//! A listener at a forged address learns nothing it could use from a
//! request: not the secret, not the key, and no MAC it could replay
//! elsewhere (each names its receiver and is accepted once). A sender
//! shows nothing to a peer before the peer proved itself: the first call
//! to an address is [`HELLO_PATH`], with an empty body, and only a reply
//! that verifies lets the log, snapshots or commands follow
//! (`http_network`). Without TLS the traffic between nodes is still
//! readable on the path; with `--tls-cert` it is not.
//!
//! This module does no IO: signing and checking are pure functions of
//! their inputs, the time included.

use std::collections::HashMap;
use std::sync::Mutex;

use hmac::{KeyInit, Mac};
use hookraft_core::entropy::hex;
use sha2::Sha256;

use crate::NodeId;

/// The header of every node-to-node request.
pub const LINK_HEADER: &str = "x-hookraft-link";
/// The header of a `200` reply to one.
pub const LINK_REPLY_HEADER: &str = "x-hookraft-link-reply";
/// The call a sender makes first to an address, with an empty body: its
/// verified reply proves the peer holds the secret.
pub const HELLO_PATH: &str = "/internal/hello";
/// How far a request's time may be from the receiver's clock.
pub const LINK_SKEW_MS: u64 = 60_000;
/// How far behind the newest `seq` of a sender's run a request may still
/// arrive (requests travel on several connections at once).
pub const REPLAY_WINDOW: u64 = 4_096;
/// Runs (`boot`s) remembered per sender: a restart starts a new one.
const RUNS_PER_SENDER_MAX: usize = 4;
/// Senders remembered; only requests with a valid MAC add one.
const SENDERS_MAX: usize = 1_024;

type HmacSha256 = hmac::Hmac<Sha256>;

/// The MAC key of the node links, derived from the cluster secret.
#[derive(Clone)]
pub struct LinkKey(HmacSha256);

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(<redacted>)")
    }
}

/// Who sent a request, and which of its requests it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub from: NodeId,
    pub to: NodeId,
    pub time_ms: u64,
    /// Drawn at random when the sender started.
    pub boot: u64,
    /// Counts the sender's requests in this run.
    pub seq: u64,
}

/// Why a request or reply was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("no `{LINK_HEADER}` header")]
    Missing,
    #[error("the `{LINK_HEADER}` header is malformed")]
    Malformed,
    #[error("addressed to node {to}, not this node ({me})")]
    WrongNode { to: NodeId, me: NodeId },
    #[error("its time is {off_ms} ms from this node's clock (at most {LINK_SKEW_MS}); check the nodes' clocks")]
    Skewed { off_ms: u64 },
    #[error("the MAC does not verify: a different cluster secret")]
    BadMac,
    #[error("a replay of a request already seen")]
    Replayed,
}

impl LinkKey {
    /// The key of a cluster secret.
    pub fn derive(secret: &str) -> Self {
        let mut outer = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
        outer.update(b"hookraft node link v1");
        let key = outer.finalize().into_bytes();
        Self(HmacSha256::new_from_slice(&key).expect("HMAC takes a key of any length"))
    }

    fn request_mac(&self, stamp: &Stamp, path: &str, body: &[u8]) -> [u8; 32] {
        let mut mac = self.0.clone();
        mac.update(b"request\0");
        update_stamp(&mut mac, stamp);
        mac.update(path.as_bytes());
        mac.update(b"\0");
        mac.update(body);
        mac.finalize().into_bytes().into()
    }

    fn reply_mac(&self, stamp: &Stamp, status: u16, body: &[u8]) -> [u8; 32] {
        let mut mac = self.0.clone();
        mac.update(b"reply\0");
        update_stamp(&mut mac, stamp);
        mac.update(&status.to_be_bytes());
        mac.update(body);
        mac.finalize().into_bytes().into()
    }

    /// The [`LINK_HEADER`] value of a request.
    pub fn sign_request(&self, stamp: &Stamp, path: &str, body: &[u8]) -> String {
        let mac = self.request_mac(stamp, path, body);
        format!("v1 {} {} {} {:016x} {} {}", stamp.from, stamp.to, stamp.time_ms, stamp.boot, stamp.seq, hex(&mac))
    }

    /// Checks a request's header against its path and body, for node `me`
    /// at `now_ms`; the replay check is the caller's ([`ReplayGuard`]).
    pub fn verify_request(
        &self,
        header: Option<&str>,
        me: NodeId,
        now_ms: u64,
        path: &str,
        body: &[u8],
    ) -> Result<Stamp, LinkError> {
        let (stamp, sent) = parse_header(header.ok_or(LinkError::Missing)?)?;
        if stamp.to != me {
            return Err(LinkError::WrongNode { to: stamp.to, me });
        }
        let off_ms = now_ms.abs_diff(stamp.time_ms);
        if off_ms > LINK_SKEW_MS {
            return Err(LinkError::Skewed { off_ms });
        }
        if !constant_time_eq(&self.request_mac(&stamp, path, body), &sent) {
            return Err(LinkError::BadMac);
        }
        Ok(stamp)
    }

    /// The [`LINK_REPLY_HEADER`] value of a reply to `stamp`'s request.
    pub fn sign_reply(&self, stamp: &Stamp, status: u16, body: &[u8]) -> String {
        format!("v1 {}", hex(&self.reply_mac(stamp, status, body)))
    }

    /// Checks a reply to the request `stamp` signed.
    pub fn verify_reply(&self, header: Option<&str>, stamp: &Stamp, status: u16, body: &[u8]) -> Result<(), LinkError> {
        let text = header.ok_or(LinkError::Missing)?;
        let sent = text.strip_prefix("v1 ").and_then(unhex32).ok_or(LinkError::Malformed)?;
        if constant_time_eq(&self.reply_mac(stamp, status, body), &sent) { Ok(()) } else { Err(LinkError::BadMac) }
    }
}

fn update_stamp(mac: &mut HmacSha256, stamp: &Stamp) {
    for field in [stamp.from, stamp.to, stamp.time_ms, stamp.boot, stamp.seq] {
        mac.update(&field.to_be_bytes());
    }
}

fn parse_header(text: &str) -> Result<(Stamp, [u8; 32]), LinkError> {
    let fields: Vec<&str> = text.split(' ').collect();
    let ["v1", from, to, time_ms, boot, seq, mac] = fields[..] else { return Err(LinkError::Malformed) };
    let number = |t: &str| t.parse::<u64>().ok().filter(|_| t.bytes().all(|b| b.is_ascii_digit()));
    let stamp = Stamp {
        from: number(from).ok_or(LinkError::Malformed)?,
        to: number(to).ok_or(LinkError::Malformed)?,
        time_ms: number(time_ms).ok_or(LinkError::Malformed)?,
        boot: (boot.len() == 16).then(|| u64::from_str_radix(boot, 16).ok()).flatten().ok_or(LinkError::Malformed)?,
        seq: number(seq).ok_or(LinkError::Malformed)?,
    };
    Ok((stamp, unhex32(mac).ok_or(LinkError::Malformed)?))
}

fn unhex32(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        let pair = text.get(2 * i..2 * i + 2)?;
        if !pair.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The `(boot, seq)` pairs a receiver has seen, per sender: a window of
/// [`REPLAY_WINDOW`] below the newest `seq` of each run, and older ones
/// refused. Only requests whose MAC verified reach it, so its size is the
/// cluster's: at most [`SENDERS_MAX`] senders of [`RUNS_PER_SENDER_MAX`]
/// runs each. A run not heard from for twice [`LINK_SKEW_MS`] is dropped:
/// its requests are refused for their time by then.
#[derive(Debug, Default)]
pub struct ReplayGuard {
    runs: Mutex<HashMap<NodeId, Vec<Run>>>,
}

#[derive(Debug)]
struct Run {
    boot: u64,
    newest: u64,
    /// Bit `i` of word `i / 64`: `newest - i` was seen.
    seen: Box<[u64; (REPLAY_WINDOW / 64) as usize]>,
    last_ms: u64,
}

impl Run {
    fn new(boot: u64, seq: u64, now_ms: u64) -> Self {
        let mut seen = Box::new([0u64; (REPLAY_WINDOW / 64) as usize]);
        seen[0] = 1;
        Self { boot, newest: seq, seen, last_ms: now_ms }
    }

    /// Records `seq`; false when it was seen or is too old to tell.
    fn admit(&mut self, seq: u64, now_ms: u64) -> bool {
        self.last_ms = now_ms;
        if seq > self.newest {
            self.shift(seq - self.newest);
            self.newest = seq;
            self.seen[0] |= 1;
            return true;
        }
        let back = self.newest - seq;
        if back >= REPLAY_WINDOW {
            return false;
        }
        let (word, bit) = ((back / 64) as usize, back % 64);
        let fresh = self.seen[word] & (1 << bit) == 0;
        self.seen[word] |= 1 << bit;
        fresh
    }

    /// Moves the window up by `by` (older bits fall off the end).
    fn shift(&mut self, by: u64) {
        let words = self.seen.len();
        if by >= REPLAY_WINDOW {
            self.seen.fill(0);
            return;
        }
        let (whole, bits) = ((by / 64) as usize, (by % 64) as u32);
        for i in (0..words).rev() {
            let from = i.checked_sub(whole);
            let high = from.map_or(0, |j| self.seen[j] << bits);
            let low = match from.and_then(|j| j.checked_sub(1)) {
                Some(k) if bits > 0 => self.seen[k] >> (64 - bits),
                _ => 0,
            };
            self.seen[i] = high | low;
        }
    }
}

impl ReplayGuard {
    /// Records a verified request; false when it is a replay.
    pub fn admit(&self, stamp: &Stamp, now_ms: u64) -> bool {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        let stale_before = now_ms.saturating_sub(2 * LINK_SKEW_MS);
        if runs.len() >= SENDERS_MAX && !runs.contains_key(&stamp.from) {
            runs.retain(|_, list| list.iter().any(|run| run.last_ms >= stale_before));
            if runs.len() >= SENDERS_MAX {
                return false;
            }
        }
        let list = runs.entry(stamp.from).or_default();
        if let Some(run) = list.iter_mut().find(|run| run.boot == stamp.boot) {
            return run.admit(stamp.seq, now_ms);
        }
        list.retain(|run| run.last_ms >= stale_before);
        if list.len() >= RUNS_PER_SENDER_MAX {
            // The run heard from least recently makes room.
            if let Some(oldest) = list.iter().enumerate().min_by_key(|(_, run)| run.last_ms).map(|(i, _)| i) {
                list.swap_remove(oldest);
            }
        }
        list.push(Run::new(stamp.boot, stamp.seq, now_ms));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn stamp(seq: u64) -> Stamp {
        Stamp { from: 1, to: 2, time_ms: NOW, boot: 0xfeed_beef_0000_0001, seq }
    }

    #[test]
    fn a_signed_request_verifies_at_its_receiver_only() {
        let key = LinkKey::derive("a-cluster-secret-of-thirty-two-chars");
        let header = key.sign_request(&stamp(7), "/internal/raft/append", b"entries");
        assert!(!header.contains("thirty-two"), "{header}");
        let ok = key.verify_request(Some(&header), 2, NOW + 5_000, "/internal/raft/append", b"entries");
        assert_eq!(ok, Ok(stamp(7)));
        let check = |me, now, path: &str, body: &[u8]| key.verify_request(Some(&header), me, now, path, body);
        assert_eq!(check(3, NOW, "/internal/raft/append", b"entries"), Err(LinkError::WrongNode { to: 2, me: 3 }));
        assert_eq!(check(2, NOW, "/internal/propose", b"entries"), Err(LinkError::BadMac));
        assert_eq!(check(2, NOW, "/internal/raft/append", b"entrieS"), Err(LinkError::BadMac));
        assert!(matches!(
            check(2, NOW + LINK_SKEW_MS + 1, "/internal/raft/append", b"entries"),
            Err(LinkError::Skewed { .. })
        ));
        let other = LinkKey::derive("another-cluster-secret-thirty-two-c");
        assert_eq!(
            other.verify_request(Some(&header), 2, NOW, "/internal/raft/append", b"entries"),
            Err(LinkError::BadMac)
        );
    }

    #[test]
    fn malformed_or_missing_headers_are_refused() {
        let key = LinkKey::derive("a-cluster-secret-of-thirty-two-chars");
        let good = key.sign_request(&stamp(1), "/p", b"");
        let mut cases = vec![String::new(), "v1".into(), good.replace("v1 ", "v2 "), good.replace(' ', "  ")];
        cases.push(format!("{good} extra"));
        cases.push(good.replacen(" 1 ", " +1 ", 1));
        for bad in &cases {
            assert_eq!(key.verify_request(Some(bad), 2, NOW, "/p", b""), Err(LinkError::Malformed), "{bad:?}");
        }
        assert_eq!(key.verify_request(None, 2, NOW, "/p", b""), Err(LinkError::Missing));
    }

    #[test]
    fn a_reply_verifies_for_its_request_status_and_body() {
        let key = LinkKey::derive("a-cluster-secret-of-thirty-two-chars");
        let reply = key.sign_reply(&stamp(3), 200, b"answer");
        assert_eq!(key.verify_reply(Some(&reply), &stamp(3), 200, b"answer"), Ok(()));
        assert_eq!(key.verify_reply(Some(&reply), &stamp(4), 200, b"answer"), Err(LinkError::BadMac));
        assert_eq!(key.verify_reply(Some(&reply), &stamp(3), 200, b"answeR"), Err(LinkError::BadMac));
        assert_eq!(key.verify_reply(None, &stamp(3), 200, b"answer"), Err(LinkError::Missing));
        let forger = LinkKey::derive("a-forged-listener-guessing-the-key");
        let forged = forger.sign_reply(&stamp(3), 200, b"answer");
        assert_eq!(key.verify_reply(Some(&forged), &stamp(3), 200, b"answer"), Err(LinkError::BadMac));
    }

    #[test]
    fn each_request_is_admitted_once_in_any_order_within_the_window() {
        let guard = ReplayGuard::default();
        for seq in [5, 3, 9, 4, 100, 6] {
            assert!(guard.admit(&stamp(seq), NOW), "{seq}");
        }
        for seq in [5, 3, 9, 100] {
            assert!(!guard.admit(&stamp(seq), NOW), "{seq} replayed");
        }
        assert!(guard.admit(&stamp(7), NOW), "7 was never seen");
        assert!(guard.admit(&stamp(100 + REPLAY_WINDOW), NOW));
        assert!(!guard.admit(&stamp(100), NOW), "fell out of the window: refused");
        assert!(guard.admit(&stamp(101 + 64), NOW), "inside the window, never seen");
        assert!(!guard.admit(&stamp(101 + 64), NOW));
        // A restarted sender (a new boot) starts again from 1.
        let restarted = Stamp { boot: 2, ..stamp(1) };
        assert!(guard.admit(&restarted, NOW));
        assert!(!guard.admit(&restarted, NOW));
    }

    #[test]
    fn the_window_shifts_bits_across_words() {
        let mut run = Run::new(1, 1_000, NOW);
        for seq in (900..1_000).step_by(7) {
            assert!(run.admit(seq, NOW));
        }
        run.admit(1_130, NOW);
        for seq in (900..1_000).step_by(7) {
            assert!(!run.admit(seq, NOW), "{seq} moved with the window and is still known");
        }
        assert!(run.admit(901, NOW));
    }
}
