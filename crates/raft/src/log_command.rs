//! [`LogCommand`]: the command a log entry carries, shared rather than copied.
//!
//! openraft clones an entry each time it hands it out: to replicate it, to
//! resend it to a follower that did not answer, to apply it. A command can
//! hold a whole ingest batch, so a clone of the command itself copied every
//! payload; the simulator spent a quarter of its time there. Behind an
//! `Arc`, a clone is a counter increment. It encodes exactly as the command
//! it holds, so the log's format does not change.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use hookraft_core::Command;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A [`Command`] in the Raft log.
#[derive(Clone, PartialEq)]
pub struct LogCommand(Arc<Command>);

impl LogCommand {
    pub fn new(command: Command) -> Self {
        Self(Arc::new(command))
    }
}

impl From<Command> for LogCommand {
    fn from(command: Command) -> Self {
        Self::new(command)
    }
}

impl Deref for LogCommand {
    type Target = Command;

    fn deref(&self) -> &Command {
        &self.0
    }
}

impl fmt::Debug for LogCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for LogCommand {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for LogCommand {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Command::deserialize(deserializer).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode};

    #[test]
    fn encodes_exactly_as_the_command_it_holds() {
        let command = Command::Heartbeat { node_id: 2, now_ms: 1_700_000_000_000, lease_ms: 6_000 };
        let shared = LogCommand::from(command.clone());
        assert_eq!(encode("shared", &shared).unwrap(), encode("plain", &command).unwrap());
        let back: LogCommand = decode("shared", &encode("plain", &command).unwrap()).unwrap();
        assert_eq!(*back, command);
    }

    #[test]
    fn clones_share_the_command() {
        let shared = LogCommand::new(Command::Noop);
        let clone = shared.clone();
        assert!(std::ptr::eq(&*shared, &*clone));
    }
}
