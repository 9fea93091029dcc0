//! Traffic: frame templates, stamps and pacing; the generator and analyzer
//! stages. Trials, which drive a plan's generators and analyzers, are
//! [`crate::trial`].

pub mod analyzer;
pub mod generator;
pub mod pace;
pub mod stamp;
pub mod template;
