//! Which accepted connections are served, decided without waiting.
//!
//! A connection from a member's address takes a permit of the members'
//! pool; when that is empty, or the address is not a member's, the
//! connection counts against its address's cap and takes a permit of the
//! public pool. When the public pool is empty it joins the waiting room
//! (bounded too) and waits for a permit a bounded time. Refusals are
//! logged at most once per [`WARN_EVERY`] and reason, with their count.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::Limits;
use super::members::Members;

/// Shortest time between two warnings of the same refusal.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// Why a connection was closed without being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its address already held as many connections as it may.
    AddressCap,
    /// The public pool and the waiting room were both full.
    WaitingRoomFull,
    /// It waited for a permit of the public pool in vain.
    PoolFull,
}

impl Refused {
    const ALL: usize = 3;

    fn index(self) -> usize {
        self as usize
    }

    fn reason(self) -> &'static str {
        match self {
            Refused::AddressCap => "its address holds as many connections as it may (--connections-per-address)",
            Refused::WaitingRoomFull => "every connection permit is taken and too many connections wait for one",
            Refused::PoolFull => "no connection permit came free in time",
        }
    }
}

/// The pools, the count per address and the waiting room.
pub struct Admission {
    public: Arc<Semaphore>,
    members_pool: Arc<Semaphore>,
    waiting_room: Arc<Semaphore>,
    per_address: usize,
    permit_wait: Duration,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
    members: Members,
    warnings: Mutex<[Warned; Refused::ALL]>,
}

/// What admits a connection now or after a wait.
pub enum Admitted {
    Now(Ticket),
    AfterWait(Waiting),
}

/// What a served connection holds until it closes.
pub struct Ticket {
    _permit: OwnedSemaphorePermit,
    _address: Option<AddressSlot>,
}

/// A connection in the waiting room.
pub struct Waiting {
    public: Arc<Semaphore>,
    wait: Duration,
    address: AddressSlot,
    _place: OwnedSemaphorePermit,
}

impl Waiting {
    /// A permit of the public pool within the wait, else [`Refused::PoolFull`].
    pub async fn ticket(self) -> Result<Ticket, Refused> {
        match tokio::time::timeout(self.wait, self.public.acquire_owned()).await {
            Ok(Ok(permit)) => Ok(Ticket { _permit: permit, _address: Some(self.address) }),
            Ok(Err(_)) | Err(_) => Err(Refused::PoolFull),
        }
    }
}

/// One of an address's open connections; counted until dropped.
struct AddressSlot {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Entry::Occupied(mut count) = open.entry(self.ip) {
            *count.get_mut() -= 1;
            if *count.get() == 0 {
                count.remove();
            }
        }
    }
}

/// The last warning of one reason and the refusals since.
#[derive(Debug, Default, Clone, Copy)]
struct Warned {
    at: Option<Instant>,
    refused: u64,
}

impl Admission {
    pub fn new(limits: &Limits, members: Members) -> Self {
        Self {
            public: Arc::new(Semaphore::new(limits.connections_max)),
            members_pool: Arc::new(Semaphore::new(limits.peer_connections_max)),
            waiting_room: Arc::new(Semaphore::new(limits.waiting_max)),
            per_address: limits.connections_per_address,
            permit_wait: limits.permit_wait,
            open: Arc::default(),
            members,
            warnings: Mutex::default(),
        }
    }

    /// Admits a connection from `ip`, or says why not.
    pub fn admit(&self, ip: IpAddr) -> Result<Admitted, Refused> {
        let ip = ip.to_canonical();
        if self.members.contains(ip)
            && let Ok(permit) = self.members_pool.clone().try_acquire_owned()
        {
            return Ok(Admitted::Now(Ticket { _permit: permit, _address: None }));
        }
        let address = self.address_slot(ip).ok_or(Refused::AddressCap)?;
        if let Ok(permit) = self.public.clone().try_acquire_owned() {
            return Ok(Admitted::Now(Ticket { _permit: permit, _address: Some(address) }));
        }
        let place = self.waiting_room.clone().try_acquire_owned().map_err(|_| Refused::WaitingRoomFull)?;
        Ok(Admitted::AfterWait(Waiting { public: self.public.clone(), wait: self.permit_wait, address, _place: place }))
    }

    /// Counts one more connection of `ip`, unless it is at its cap.
    fn address_slot(&self, ip: IpAddr) -> Option<AddressSlot> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(ip).or_insert(0);
        if *count >= self.per_address {
            return None;
        }
        *count += 1;
        Some(AddressSlot { open: self.open.clone(), ip })
    }

    /// Logs a refusal, at most once per [`WARN_EVERY`] and reason.
    pub fn refused(&self, why: Refused, peer: SocketAddr) {
        let refused = {
            let mut warnings = self.warnings.lock().unwrap_or_else(PoisonError::into_inner);
            let warned = &mut warnings[why.index()];
            warned.refused += 1;
            let now = Instant::now();
            if warned.at.is_some_and(|at| now < at + WARN_EVERY) {
                return;
            }
            warned.at = Some(now);
            std::mem::take(&mut warned.refused)
        };
        tracing::warn!(%peer, refused, "closed connections without serving them: {}", why.reason());
    }

    /// Connections an address holds now (tests).
    #[cfg(test)]
    pub fn open_from(&self, ip: IpAddr) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).get(&ip.to_canonical()).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(public: usize, members: usize, per_address: usize, waiting: usize) -> Limits {
        Limits {
            connections_max: public,
            peer_connections_max: members,
            connections_per_address: per_address,
            waiting_max: waiting,
            permit_wait: Duration::from_millis(50),
            ..Limits::default()
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn now(admitted: Result<Admitted, Refused>) -> Ticket {
        match admitted {
            Ok(Admitted::Now(ticket)) => ticket,
            Ok(Admitted::AfterWait(_)) => panic!("waits"),
            Err(why) => panic!("refused: {why:?}"),
        }
    }

    #[test]
    fn an_address_holds_up_to_its_cap_and_again_once_one_closes() {
        let admission = Admission::new(&limits(10, 1, 2, 1), Members::default());
        let first = now(admission.admit(ip("10.0.0.1")));
        let _second = now(admission.admit(ip("::ffff:10.0.0.1")));
        assert_eq!(admission.admit(ip("10.0.0.1")).err(), Some(Refused::AddressCap));
        let _other = now(admission.admit(ip("10.0.0.2")));
        drop(first);
        assert_eq!(admission.open_from(ip("10.0.0.1")), 1);
        let _third = now(admission.admit(ip("10.0.0.1")));
    }

    #[tokio::test]
    async fn members_take_their_own_pool_then_the_public_one() {
        let member = ip("10.0.0.9");
        let admission = Admission::new(&limits(1, 1, 1, 1), Members::fixed([member]));
        let _public = now(admission.admit(ip("10.0.0.1")));
        let _reserved = now(admission.admit(member));
        assert_eq!(admission.open_from(member), 0, "a member's own pool does not count against its address");
        // The members' pool is empty: the public one, full, makes it wait.
        let Ok(Admitted::AfterWait(waiting)) = admission.admit(member) else { panic!("waits") };
        assert_eq!(admission.open_from(member), 1);
        // The waiting room is full too.
        assert_eq!(admission.admit(ip("10.0.0.2")).err(), Some(Refused::WaitingRoomFull));
        assert_eq!(waiting.ticket().await.err(), Some(Refused::PoolFull));
        assert_eq!(admission.open_from(member), 0);
    }

    #[tokio::test]
    async fn a_waiting_connection_gets_the_permit_that_comes_free() {
        let mut limits = limits(1, 1, 4, 1);
        limits.permit_wait = Duration::from_secs(30);
        let admission = Admission::new(&limits, Members::default());
        let first = now(admission.admit(ip("10.0.0.1")));
        let Ok(Admitted::AfterWait(waiting)) = admission.admit(ip("10.0.0.1")) else { panic!("waits") };
        let ticket = tokio::spawn(waiting.ticket());
        drop(first);
        assert!(ticket.await.unwrap().is_ok());
    }
}
