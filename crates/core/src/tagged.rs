//! Versioned bincode layouts for records that shipped without a version.
//!
//! Bincode is positional and not self-describing, so a field cannot be
//! added to a record that logs and snapshots already hold. A record whose
//! first layout began with an id's text (`Event`, `Endpoint`, `NewEvent`)
//! now begins with [`TAG`], an empty string no id can be, then a layout
//! version, then its fields. Decoding reads the first string and picks the
//! layout from it. [`Tagged`] is what each record says about its layouts;
//! this module does the reading.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serializer};

/// Starts a tagged layout: never an id's text.
pub(crate) const TAG: &str = "";
/// The first layout was untagged, so tagged ones start at 2.
pub(crate) const FIRST_TAGGED_VERSION: u8 = 2;

/// A record with a tagged layout.
pub(crate) trait Tagged: Sized {
    /// Names it in errors ("an event").
    const WHAT: &'static str;
    /// The layout version this build writes; it reads every tagged one
    /// from [`FIRST_TAGGED_VERSION`] to this.
    const VERSION: u8;
    /// Elements of the current layout, tag and version included.
    const ELEMENTS: usize;

    /// Reads the rest of the first layout, which began with `first`.
    fn read_first<'de, A: SeqAccess<'de>>(first: String, elements: &mut Elements<A>) -> Result<Self, A::Error>;

    /// Reads the fields of tagged layout `version` (at least
    /// [`FIRST_TAGGED_VERSION`], at most [`Tagged::VERSION`]), after its
    /// tag and version. A later layout only appends fields.
    fn read_tagged<'de, A: SeqAccess<'de>>(version: u8, elements: &mut Elements<A>) -> Result<Self, A::Error>;
}

/// The elements of a record being decoded, counted for the errors.
pub(crate) struct Elements<A> {
    seq: A,
    read: usize,
    what: &'static str,
}

impl<'de, A: SeqAccess<'de>> Elements<A> {
    /// The next element; a record that ends early is an error naming it.
    pub(crate) fn next<T: Deserialize<'de>>(&mut self) -> Result<T, A::Error> {
        let index = self.read;
        self.read += 1;
        self.seq.next_element()?.ok_or_else(|| de::Error::invalid_length(index, &self.what))
    }
}

/// Starts encoding the current layout of `T`: the tag and the version.
pub(crate) fn begin<T: Tagged, S: Serializer>(serializer: S) -> Result<S::SerializeTuple, S::Error> {
    let mut tuple = serializer.serialize_tuple(T::ELEMENTS)?;
    tuple.serialize_element(TAG)?;
    tuple.serialize_element(&T::VERSION)?;
    Ok(tuple)
}

/// Decodes a `T` of either layout.
pub(crate) fn deserialize<'de, T: Tagged, D: Deserializer<'de>>(deserializer: D) -> Result<T, D::Error> {
    deserializer.deserialize_tuple(T::ELEMENTS, TaggedVisitor(PhantomData))
}

struct TaggedVisitor<T>(PhantomData<T>);

impl<'de, T: Tagged> Visitor<'de> for TaggedVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(T::WHAT)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        let mut elements = Elements { seq, read: 0, what: T::WHAT };
        let first: String = elements.next()?;
        if first != TAG {
            return T::read_first(first, &mut elements);
        }
        let version: u8 = elements.next()?;
        if !(FIRST_TAGGED_VERSION..=T::VERSION).contains(&version) {
            return Err(de::Error::custom(format!(
                "{} layout {version} is not one this build reads ({})",
                T::WHAT.trim_start_matches("an ").trim_start_matches("a "),
                T::VERSION
            )));
        }
        T::read_tagged(version, &mut elements)
    }
}
