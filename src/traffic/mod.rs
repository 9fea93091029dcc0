//! Traffic: frame templates, stamps and pacing; the generator and analyzer
//! stages; trials.

pub mod analyzer;
pub mod generator;
pub mod pace;
pub mod stamp;
pub mod template;
pub mod trial;
