//! # ccattler-controllers
//!
//! The pure scheduler, the standard controllers and the `.cca` language.
//!
//! This crate is still empty: the schema, the language and the controllers are being built (see
//! the project's issues on the language and the scheduler). Nothing here is usable yet.
