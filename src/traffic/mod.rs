//! Traffic: frame templates and stamps; the generator (paced by
//! [`crate::pace`]) and analyzer stages. Trials, which drive a plan's
//! generators and analyzers, are [`crate::trial`].

pub mod analyzer;
pub mod encap;
pub mod generator;
pub mod stamp;
pub mod template;
