//! Typed, spanned access to one section of a pipeline file. Each accessor
//! records what was read, reports a wrong type or an unparsable value with its
//! span, and `finish` reports every key nobody read.

use std::ops::Range;
use std::time::Duration;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::diag::{suggest, Sink};
use crate::units::{parse_duration, parse_size, Rate};

/// One key of a section, as `linerate keys` shows it and as "valid:" lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The key's name in files.
    pub name: &'static str,
    /// What it takes, in words (`"integer 1..=64"`, `"rate"`, `"string"`).
    pub ty: &'static str,
    /// Its default as written in a file, or `"required"`, or `"none"` (unset).
    pub default: &'static str,
    /// What it means, in one line.
    pub doc: &'static str,
}

impl Key {
    /// A key's metadata.
    pub const fn new(
        name: &'static str,
        ty: &'static str,
        default: &'static str,
        doc: &'static str,
    ) -> Key {
        Key {
            name,
            ty,
            default,
            doc,
        }
    }
}

/// A section or a kind of port or stage, with its keys: what the registry
/// knows for documentation (`linerate keys`).
#[derive(Debug, Clone, Copy)]
pub struct KindDoc {
    /// The kind's name (`kind = "..."`), or the section's (`pipeline`).
    pub name: &'static str,
    /// How messages name it (`"a mem port"`, `"[pool]"`).
    pub what: &'static str,
    /// What it is, in one line.
    pub doc: &'static str,
    /// Its keys, in the order "valid:" lists them.
    pub keys: &'static [Key],
    /// Keys of a part the kind reads with a reader of its own (a reliable
    /// endpoint's), listed apart by `linerate keys`.
    pub more_keys: &'static [Key],
}

pub(crate) type Span = Range<usize>;

/// A section of the file (`[stage.gen]`).
pub(crate) struct Table<'t, 'i> {
    pub(crate) path: String,
    pub(crate) span: Span,
    map: &'t DeTable<'i>,
    used: Vec<String>,
}

fn type_name(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a datetime",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

pub(crate) fn as_int(v: &DeValue<'_>) -> Option<i64> {
    match v {
        DeValue::Integer(i) => {
            let digits: String = i.as_str().chars().filter(|&c| c != '_').collect();
            let digits = digits
                .trim_start_matches("0x")
                .trim_start_matches("0o")
                .trim_start_matches("0b");
            i64::from_str_radix(digits, i.radix()).ok()
        }
        _ => None,
    }
}

impl<'t, 'i> Table<'t, 'i> {
    pub(crate) fn new(path: impl Into<String>, span: Span, map: &'t DeTable<'i>) -> Self {
        Table {
            path: path.into(),
            span,
            map,
            used: Vec::new(),
        }
    }

    fn get(&mut self, key: &str) -> Option<&'t Spanned<DeValue<'i>>> {
        self.used.push(key.to_string());
        self.map.get(key)
    }

    fn wrong(&self, sink: &mut Sink<'_>, key: &str, v: &Spanned<DeValue<'_>>, want: &str) {
        sink.error(
            v.span(),
            &self.path,
            Some(key),
            format!("expected {want}, found {}", type_name(v.get_ref())),
            None,
        );
    }

    /// The span of a key's value, or of the section when absent.
    pub(crate) fn span_of(&self, key: &str) -> Span {
        self.map.get(key).map_or(self.span.clone(), |v| v.span())
    }

    /// Marks a key as read by code that inspects it with [`Table::raw`].
    pub(crate) fn mark_used(&mut self, key: &str) {
        self.used.push(key.to_string());
    }

    /// A key's raw value.
    pub(crate) fn raw(&self, key: &str) -> Option<&'t DeValue<'i>> {
        self.map.get(key).map(|v| v.get_ref())
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    pub(crate) fn string(&mut self, sink: &mut Sink<'_>, key: &str) -> Option<(String, Span)> {
        let v = self.get(key)?;
        match v.get_ref() {
            DeValue::String(s) => Some((s.to_string(), v.span())),
            _ => {
                self.wrong(sink, key, v, "a string");
                None
            }
        }
    }

    pub(crate) fn required_string(
        &mut self,
        sink: &mut Sink<'_>,
        key: &str,
        help: &str,
    ) -> Option<(String, Span)> {
        if !self.has(key) {
            sink.error(
                self.span.clone(),
                &self.path,
                Some(key),
                format!("`{key}` is required here"),
                Some(help.to_string()),
            );
            self.used.push(key.to_string());
            return None;
        }
        self.string(sink, key)
    }

    pub(crate) fn int(
        &mut self,
        sink: &mut Sink<'_>,
        key: &str,
        range: Range<i64>,
    ) -> Option<(i64, Span)> {
        let v = self.get(key)?;
        let Some(i) = as_int(v.get_ref()) else {
            self.wrong(sink, key, v, "an integer");
            return None;
        };
        if !range.contains(&i) {
            sink.error(
                v.span(),
                &self.path,
                Some(key),
                format!("{i} is out of range"),
                Some(format!(
                    "an integer from {} to {}",
                    range.start,
                    range.end - 1
                )),
            );
            return None;
        }
        Some((i, v.span()))
    }

    pub(crate) fn float(
        &mut self,
        sink: &mut Sink<'_>,
        key: &str,
        lo: f64,
        hi: f64,
    ) -> Option<f64> {
        let v = self.get(key)?;
        let x = match v.get_ref() {
            DeValue::Float(f) => f.as_str().replace('_', "").parse::<f64>().ok(),
            other => as_int(other).map(|i| i as f64),
        };
        let Some(x) = x else {
            self.wrong(sink, key, v, "a number");
            return None;
        };
        if !(lo..=hi).contains(&x) {
            sink.error(
                v.span(),
                &self.path,
                Some(key),
                format!("{x} is out of range"),
                Some(format!("a number from {lo} to {hi}")),
            );
            return None;
        }
        Some(x)
    }

    pub(crate) fn boolean(&mut self, sink: &mut Sink<'_>, key: &str) -> Option<bool> {
        let v = self.get(key)?;
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            _ => {
                self.wrong(sink, key, v, "true or false");
                None
            }
        }
    }

    /// A value given as a string to parse, or (when `numbers` allows) a bare number.
    pub(crate) fn parsed<T, E: std::fmt::Display>(
        &mut self,
        sink: &mut Sink<'_>,
        key: &str,
        parse: impl Fn(&str) -> Result<T, E>,
        what: &str,
    ) -> Option<(T, Span)> {
        let v = self.get(key)?;
        let text = match v.get_ref() {
            DeValue::String(s) => s.to_string(),
            DeValue::Integer(i) => i.as_str().to_string(),
            DeValue::Float(f) => f.as_str().to_string(),
            _ => {
                self.wrong(sink, key, v, what);
                return None;
            }
        };
        match parse(&text) {
            Ok(t) => Some((t, v.span())),
            Err(e) => {
                sink.error(v.span(), &self.path, Some(key), e.to_string(), None);
                None
            }
        }
    }

    pub(crate) fn rate(&mut self, sink: &mut Sink<'_>, key: &str) -> Option<(Rate, Span)> {
        self.parsed(sink, key, |s| s.parse::<Rate>(), "a rate like \"10 Mpps\"")
    }

    /// A port's line rate in bits/s (L1 or L2 units; packet rates and percents
    /// are errors, with `example` as the hint).
    pub(crate) fn line_rate_bps(
        &mut self,
        sink: &mut Sink<'_>,
        key: &str,
        example: &str,
    ) -> Option<f64> {
        match self.rate(sink, key)? {
            (Rate::L1Bps(b) | Rate::L2Bps(b), _) => Some(b),
            (_, s) => {
                sink.error(
                    s,
                    &self.path,
                    Some(key),
                    "a line rate is in bits/s",
                    Some(example.into()),
                );
                None
            }
        }
    }

    /// One of a fixed set of words: the value paired with the key's word, or
    /// `None` when the key is absent or (reported) not one of `choices`, naming
    /// it `what` and giving `hint` as the valid words.
    pub(crate) fn choice<T: Copy>(
        &mut self,
        sink: &mut Sink<'_>,
        key: &str,
        what: &str,
        choices: &[(&str, T)],
        hint: &str,
    ) -> Option<T> {
        let (word, span) = self.string(sink, key)?;
        let found = choices.iter().find(|(w, _)| *w == word).map(|c| c.1);
        if found.is_none() {
            sink.error(
                span,
                &self.path,
                Some(key),
                format!("unknown {what} `{word}`"),
                Some(hint.into()),
            );
        }
        found
    }

    pub(crate) fn duration(&mut self, sink: &mut Sink<'_>, key: &str) -> Option<Duration> {
        self.parsed(sink, key, parse_duration, "a duration like \"50us\"")
            .map(|x| x.0)
    }

    pub(crate) fn size(&mut self, sink: &mut Sink<'_>, key: &str) -> Option<(u64, Span)> {
        self.parsed(sink, key, parse_size, "a size like \"2 KiB\"")
    }

    /// Reports every key present that no accessor asked for (present minus
    /// read), as unknown for `what`, with the closest of `keys` as "did you
    /// mean" and all of them as what would be valid.
    pub(crate) fn finish(self, sink: &mut Sink<'_>, what: &str, keys: &[Key]) {
        let valid: Vec<&str> = keys.iter().map(|k| k.name).collect();
        // A reader that asks for a key its table does not declare is a bug in
        // the reader, not in the file: caught by every test that parses it.
        debug_assert!(
            self.used
                .iter()
                .all(|u| valid.contains(&u.as_str()) || self.map.contains_key(u.as_str())),
            "{what}: the reader asked for keys its table does not declare: {:?}",
            self.used
                .iter()
                .filter(|u| !valid.contains(&u.as_str()))
                .collect::<Vec<_>>()
        );
        for (key, _) in self.map.iter() {
            let name: &str = key.get_ref();
            if self.used.iter().any(|u| u == name) {
                continue;
            }
            let hint = suggest(name, &valid)
                .map(|s| format!(" (did you mean `{s}`?)"))
                .unwrap_or_default();
            sink.error(
                key.span(),
                &self.path,
                Some(name),
                format!("unknown key for {what}{hint}"),
                Some(valid.join(", ")),
            );
        }
    }
}
