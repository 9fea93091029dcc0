//! Traffic: frame templates, stamps, pacing; the generator and analyzer stages;
//! trials.

pub mod stamp;
pub mod template;
