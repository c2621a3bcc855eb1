//! `#[serde(with = "variant_on_dbus")]` for the fields of the API's dictionaries: on D-Bus (a
//! serializer that is not human-readable) a field goes out as a variant, which makes a struct of
//! them an `a{sv}`; in JSON (human-readable) it is the plain value, so that the same struct is the
//! status document's object with the same keys.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use zbus::zvariant::{as_value, Type};

pub fn serialize<T, S>(value: &T, serializer: S) -> Result<S::Ok, S::Error>
where
    T: Type + Serialize,
    S: Serializer,
{
    if serializer.is_human_readable() {
        value.serialize(serializer)
    } else {
        as_value::serialize(value, serializer)
    }
}

pub fn deserialize<'de, T, D>(deserializer: D) -> Result<T, D::Error>
where
    T: Type + Deserialize<'de> + 'de,
    D: Deserializer<'de>,
{
    if deserializer.is_human_readable() {
        T::deserialize(deserializer)
    } else {
        as_value::deserialize(deserializer)
    }
}

/// For a field that may be left out: pair it with `skip_serializing_if = "Option::is_none"` and
/// `default`, so that a missing key is `None` and `None` is never written.
pub mod optional {
    use super::*;

    pub fn serialize<T, S>(value: &Option<T>, serializer: S) -> Result<S::Ok, S::Error>
    where
        T: Type + Serialize,
        S: Serializer,
    {
        match value {
            Some(v) => super::serialize(v, serializer),
            None if serializer.is_human_readable() => serializer.serialize_none(),
            // D-Bus has no "nothing"; `skip_serializing_if` keeps this from happening.
            None => Err(serde::ser::Error::custom(
                "a missing value cannot be a D-Bus variant",
            )),
        }
    }

    pub fn deserialize<'de, T, D>(deserializer: D) -> Result<Option<T>, D::Error>
    where
        T: Type + Deserialize<'de> + 'de,
        D: Deserializer<'de>,
    {
        if deserializer.is_human_readable() {
            Option::<T>::deserialize(deserializer)
        } else {
            as_value::deserialize(deserializer).map(Some)
        }
    }
}
