//! Diagnostics: an error in a pipeline file names the file, line, column,
//! section and key, and says what would be valid.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One problem found in a pipeline file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// The section, like `stage.gen` (empty for the file as a whole).
    pub section: String,
    /// The key, when one is at fault.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
    /// What would be valid.
    pub help: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file.display(), self.line, self.column)?;
        match (&self.section.is_empty(), &self.key) {
            (false, Some(k)) => write!(f, "[{}] `{}`: ", self.section, k)?,
            (false, None) => write!(f, "[{}]: ", self.section)?,
            (true, Some(k)) => write!(f, "`{k}`: ")?,
            (true, None) => {}
        }
        write!(f, "{}", self.message)?;
        if let Some(h) = &self.help {
            write!(f, "\n    valid: {h}")?;
        }
        Ok(())
    }
}

/// Every problem found in a pipeline file (validation goes on after the first,
/// so the user sees them all at once).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// Collects diagnostics against one source text.
pub(crate) struct Sink<'a> {
    file: &'a Path,
    src: &'a str,
    pub(crate) diags: Vec<Diagnostic>,
}

impl<'a> Sink<'a> {
    pub(crate) fn new(file: &'a Path, src: &'a str) -> Self {
        Sink {
            file,
            src,
            diags: Vec::new(),
        }
    }

    fn position(&self, offset: usize) -> (usize, usize) {
        let before = &self.src[..offset.min(self.src.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, column)
    }

    pub(crate) fn error(
        &mut self,
        span: Range<usize>,
        section: &str,
        key: Option<&str>,
        message: impl Into<String>,
        help: Option<String>,
    ) {
        let (line, column) = self.position(span.start);
        self.diags.push(Diagnostic {
            file: self.file.to_path_buf(),
            line,
            column,
            section: section.to_string(),
            key: key.map(str::to_string),
            message: message.into(),
            help,
        });
    }
}

/// The closest candidate to `word` within a small edit distance, for "did you mean".
pub(crate) fn suggest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut cur = vec![i + 1];
            for (j, cb) in b.iter().enumerate() {
                let sub = prev[j] + usize::from(ca != *cb);
                cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
            }
            prev = cur;
        }
        prev[b.len()]
    }
    candidates
        .iter()
        .map(|c| (distance(word, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}
