//! The trace file format, version 1: JSON Lines.
//!
//! The first line is a header object, every following line one event, the
//! last line (when the trace was stopped cleanly) an `end` record:
//!
//! ```text
//! {"format":"hipmem-trace","version":1,"hipmem":"0.1.0","pid":4242,"start_unix_ns":1760000000000000000,"backend":"host","argv":["./app"]}
//! {"t":1200,"e":"pool_grow","pool":1,"dev":0,"addr":"0x7f0000000000","size":2097152}
//! {"t":1530,"e":"alloc","pool":1,"stream":3,"dev":0,"addr":"0x7f0000000000","size":4096}
//! {"t":2210,"e":"free_requested","pool":1,"stream":3,"dev":0,"addr":"0x7f0000000000","size":4096}
//! {"t":9000,"e":"end","events":3,"dropped":0}
//! ```
//!
//! `docs/trace-format.md` is the full description. [`TraceWriter`] writes the
//! format, [`TraceReader`] streams it back with errors that name the file,
//! the line and the byte offset.
#![forbid(unsafe_code)]

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The `format` value of the header line.
pub const FORMAT_NAME: &str = "hipmem-trace";

/// The format version this hipmem writes and the newest it reads. A new
/// version means an incompatible change; new event kinds and new fields are
/// added without one (readers skip what they do not know).
pub const FORMAT_VERSION: u32 = 1;

/// What happened.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// An allocation was handed out (`addr`, requested `size`, on `stream`).
    Alloc,
    /// A free was requested (hipFree / hipFreeAsync on `stream`).
    FreeRequested,
    /// A free is known to have completed on the device (the memory is reusable by any stream).
    FreeCompleted,
    /// The pool took physical memory from the backend (`addr`, `size`: the chunk mapped or segment allocated).
    PoolGrow,
    /// The pool gave physical memory back (`addr`, `size`: the chunk unmapped or segment freed).
    PoolRelease,
    /// A trim was requested (`size`: the bytes to keep).
    Trim,
    /// An allocation failed with OutOfMemory (`size`: the request, on `stream`).
    Oom,
}

impl EventKind {
    /// Every kind, in the order of the documentation.
    pub const ALL: [EventKind; 7] = [
        EventKind::Alloc,
        EventKind::FreeRequested,
        EventKind::FreeCompleted,
        EventKind::PoolGrow,
        EventKind::PoolRelease,
        EventKind::Trim,
        EventKind::Oom,
    ];

    /// The `e` value of the line.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Alloc => "alloc",
            EventKind::FreeRequested => "free_requested",
            EventKind::FreeCompleted => "free_completed",
            EventKind::PoolGrow => "pool_grow",
            EventKind::PoolRelease => "pool_release",
            EventKind::Trim => "trim",
            EventKind::Oom => "oom",
        }
    }

    /// The kind named `name` in a line, if this version knows it.
    pub fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether lines of this kind carry a `stream` field.
    pub fn has_stream(self) -> bool {
        matches!(
            self,
            EventKind::Alloc | EventKind::FreeRequested | EventKind::FreeCompleted | EventKind::Oom
        )
    }

    /// Whether lines of this kind carry an `addr` field.
    pub fn has_addr(self) -> bool {
        !matches!(self, EventKind::Trim | EventKind::Oom)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One event. Fields a kind does not carry (see [`EventKind::has_stream`],
/// [`EventKind::has_addr`]) are 0.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Nanoseconds since the trace started (non-decreasing along the file).
    pub time_ns: u64,
    /// What happened.
    pub kind: EventKind,
    /// The pool's id ([`crate::MemPool::id`]); 0: no pool (hipMalloc / hipFree).
    pub pool: u64,
    /// The stream's id ([`crate::CoreStream::id`]); 0: none or the legacy null stream.
    pub stream: u64,
    /// The device ordinal.
    pub device: u32,
    /// The address.
    pub addr: u64,
    /// Bytes: requested (alloc, oom), freed (free_*), mapped or unmapped
    /// (pool_grow, pool_release), kept (trim).
    pub size: u64,
}

impl Event {
    /// Appends the event's line (with its newline) to `out`.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"t\":");
        push_decimal(out, self.time_ns);
        out.extend_from_slice(b",\"e\":\"");
        out.extend_from_slice(self.kind.name().as_bytes());
        out.extend_from_slice(b"\",\"pool\":");
        push_decimal(out, self.pool);
        if self.kind.has_stream() {
            out.extend_from_slice(b",\"stream\":");
            push_decimal(out, self.stream);
        }
        out.extend_from_slice(b",\"dev\":");
        push_decimal(out, self.device as u64);
        if self.kind.has_addr() {
            out.extend_from_slice(b",\"addr\":\"0x");
            push_hex(out, self.addr);
            out.push(b'"');
        }
        out.extend_from_slice(b",\"size\":");
        push_decimal(out, self.size);
        out.extend_from_slice(b"}\n");
    }
}

/// Appends `n` in decimal (the writer formats every line: no `fmt` machinery).
fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Appends `n` in lower-case hexadecimal, without a prefix.
fn push_hex(out: &mut Vec<u8>, mut n: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 16];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = DIGITS[(n & 15) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// The first line of a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// The format version ([`FORMAT_VERSION`] when written by this hipmem).
    pub version: u32,
    /// The hipmem version that wrote it.
    #[serde(default)]
    pub hipmem: String,
    /// The recording process.
    #[serde(default)]
    pub pid: u32,
    /// Wall-clock time of `t = 0`, in nanoseconds since the Unix epoch.
    #[serde(default)]
    pub start_unix_ns: u64,
    /// The backend of the process's runtime (`host`, `cuda`, ...), if known when the header was written.
    #[serde(default)]
    pub backend: Option<String>,
    /// The recording process's command line.
    #[serde(default)]
    pub argv: Vec<String>,
}

impl Header {
    /// A header for this process, starting now.
    pub fn for_this_process(backend: Option<String>, start_unix_ns: u64) -> Header {
        Header {
            format: FORMAT_NAME.into(),
            version: FORMAT_VERSION,
            hipmem: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            start_unix_ns,
            backend,
            argv: std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect(),
        }
    }

    /// The header line, with its newline.
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self)
            .unwrap_or_else(|_| format!("{{\"format\":\"{FORMAT_NAME}\",\"version\":{FORMAT_VERSION}}}"));
        line.push('\n');
        line
    }
}

/// The last line of a trace stopped cleanly.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct End {
    /// When the trace stopped (ns since its start).
    pub time_ns: u64,
    /// Event lines written.
    pub events: u64,
    /// Events recorded but lost (the queue could not take them).
    pub dropped: u64,
}

/// Writes a trace: the header at once, then events, then the end line.
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: W,
    line: Vec<u8>,
    last_t: u64,
    events: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Writes `header` to `out`.
    pub fn new(mut out: W, header: &Header) -> io::Result<TraceWriter<W>> {
        out.write_all(header.to_line().as_bytes())?;
        Ok(TraceWriter { out, line: Vec::with_capacity(160), last_t: 0, events: 0 })
    }

    /// Writes one event. A time earlier than the previous line's (two threads
    /// racing to record) is raised to it, so times never go backwards.
    pub fn write_event(&mut self, event: &Event) -> io::Result<()> {
        let mut event = *event;
        event.time_ns = event.time_ns.max(self.last_t);
        self.last_t = event.time_ns;
        self.line.clear();
        event.write_line(&mut self.line);
        self.out.write_all(&self.line)?;
        self.events += 1;
        Ok(())
    }

    /// Event lines written so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Flushes what is buffered to the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Writes the end line (`dropped`: events lost on the way) and flushes.
    pub fn finish(mut self, time_ns: u64, dropped: u64) -> io::Result<W> {
        let t = time_ns.max(self.last_t);
        writeln!(self.out, "{{\"t\":{t},\"e\":\"end\",\"events\":{},\"dropped\":{dropped}}}", self.events)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// A trace that cannot be read: which file, where, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// The file (as given).
    pub file: String,
    /// 1-based line number (0: not at a line, e.g. the file cannot be opened).
    pub line: u64,
    /// Byte offset of the start of that line.
    pub offset: u64,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}: line {} (byte offset {}): {}", self.file, self.line, self.offset, self.message)
        }
    }
}

impl std::error::Error for TraceError {}

impl From<TraceError> for crate::error::Error {
    fn from(e: TraceError) -> crate::error::Error {
        crate::error::Error::InvalidValue(e.to_string())
    }
}

/// A line as parsed, before its kind's fields are checked.
#[derive(Deserialize)]
struct RawLine {
    t: Option<u64>,
    e: Option<String>,
    pool: Option<u64>,
    stream: Option<u64>,
    dev: Option<u32>,
    addr: Option<serde_json::Value>,
    size: Option<u64>,
    events: Option<u64>,
    dropped: Option<u64>,
}

/// Streams a trace back: [`TraceReader::header`], then the events in order
/// (as an iterator of results), then [`TraceReader::end`].
///
/// Errors name the file, the line and its byte offset; a last line without
/// its newline is a truncated trace. Lines of a kind this version does not
/// know are skipped and counted ([`TraceReader::skipped`]).
#[derive(Debug)]
pub struct TraceReader<R: BufRead> {
    input: R,
    file: String,
    header: Header,
    line: u64,
    offset: u64,
    next_offset: u64,
    buf: Vec<u8>,
    end: Option<End>,
    skipped: u64,
    failed: bool,
}

impl TraceReader<BufReader<File>> {
    /// Opens the trace at `path` and reads its header.
    pub fn open(path: impl AsRef<Path>) -> Result<TraceReader<BufReader<File>>, TraceError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let file = File::open(path).map_err(|e| TraceError {
            file: name.clone(),
            line: 0,
            offset: 0,
            message: format!("cannot open: {e}"),
        })?;
        TraceReader::new(BufReader::with_capacity(1 << 16, file), name)
    }
}

impl<R: BufRead> TraceReader<R> {
    /// Reads the header from `input`; `file` names it in errors.
    pub fn new(input: R, file: impl Into<String>) -> Result<TraceReader<R>, TraceError> {
        let mut reader = TraceReader {
            input,
            file: file.into(),
            header: Header {
                format: String::new(),
                version: 0,
                hipmem: String::new(),
                pid: 0,
                start_unix_ns: 0,
                backend: None,
                argv: Vec::new(),
            },
            line: 0,
            offset: 0,
            next_offset: 0,
            buf: Vec::new(),
            end: None,
            skipped: 0,
            failed: false,
        };
        if !reader.read_line()? {
            return Err(reader.error_at(0, 0, "empty file: not a hipmem trace".into()));
        }
        let not_trace = |why: String| format!("not a hipmem trace: {why}");
        let value: serde_json::Value = serde_json::from_slice(&reader.buf)
            .map_err(|e| reader.error(not_trace(format!("the first line is not JSON ({e})"))))?;
        if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT_NAME) {
            return Err(
                reader.error(not_trace(format!("the first line has no \"format\":\"{FORMAT_NAME}\"")))
            );
        }
        let header: Header = serde_json::from_value(value)
            .map_err(|e| reader.error(format!("the header line is malformed: {e}")))?;
        if header.version == 0 || header.version > FORMAT_VERSION {
            return Err(reader.error(format!(
                "trace format version {} is not one this hipmem reads (1 to {FORMAT_VERSION})",
                header.version
            )));
        }
        reader.header = header;
        Ok(reader)
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The end line, once the events are read (None: the trace was not
    /// stopped cleanly, or is not read to its end yet).
    pub fn end(&self) -> Option<&End> {
        self.end.as_ref()
    }

    /// Lines skipped because their kind is unknown to this version.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The file name errors use.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The current line number (of the last line read).
    pub fn line(&self) -> u64 {
        self.line
    }

    fn error_at(&self, line: u64, offset: u64, message: String) -> TraceError {
        TraceError { file: self.file.clone(), line, offset, message }
    }

    fn error(&self, message: String) -> TraceError {
        self.error_at(self.line, self.offset, message)
    }

    /// Reads the next non-empty line into `buf` (without its newline); false at the end.
    fn read_line(&mut self) -> Result<bool, TraceError> {
        loop {
            self.buf.clear();
            self.offset = self.next_offset;
            let n = self
                .input
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| self.error_at(self.line + 1, self.offset, format!("cannot read: {e}")))?;
            if n == 0 {
                return Ok(false);
            }
            self.line += 1;
            self.next_offset += n as u64;
            if self.buf.last() != Some(&b'\n') {
                return Err(self.error(format!(
                    "truncated: the last line ends after {n} bytes without its newline (the trace was cut off)"
                )));
            }
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
            if !self.buf.iter().all(u8::is_ascii_whitespace) {
                return Ok(true);
            }
        }
    }

    /// The next event; None at the end of the file.
    pub fn next_event(&mut self) -> Result<Option<Event>, TraceError> {
        if self.failed {
            return Ok(None);
        }
        let result = self.next_event_inner();
        if result.is_err() {
            self.failed = true;
        }
        result
    }

    fn next_event_inner(&mut self) -> Result<Option<Event>, TraceError> {
        loop {
            if !self.read_line()? {
                return Ok(None);
            }
            if self.end.is_some() {
                return Err(self.error("a line after the end line".into()));
            }
            let raw: RawLine = serde_json::from_slice(&self.buf).map_err(|e| {
                let what =
                    if std::str::from_utf8(&self.buf).is_err() { "not text" } else { "not a JSON object" };
                self.error(format!("{what}: {e}"))
            })?;
            let Some(name) = raw.e.as_deref() else {
                return Err(self.error("an event line without \"e\" (its kind)".into()));
            };
            let t = raw.t.ok_or_else(|| self.error(format!("a {name} line without \"t\" (its time)")))?;
            if name == "end" {
                self.end = Some(End {
                    time_ns: t,
                    events: raw.events.unwrap_or(0),
                    dropped: raw.dropped.unwrap_or(0),
                });
                continue;
            }
            let Some(kind) = EventKind::from_name(name) else {
                self.skipped += 1;
                continue;
            };
            let need = |field: Option<u64>, what: &str| {
                field.ok_or_else(|| self.error(format!("a {name} line without \"{what}\"")))
            };
            let addr = if kind.has_addr() {
                let value =
                    raw.addr.as_ref().ok_or_else(|| self.error(format!("a {name} line without \"addr\"")))?;
                parse_addr(value).ok_or_else(|| {
                    self.error(format!(
                        "\"addr\" must be a hex string such as \"0x7f00\" or a number, not {value}"
                    ))
                })?
            } else {
                0
            };
            return Ok(Some(Event {
                time_ns: t,
                kind,
                pool: need(raw.pool, "pool")?,
                stream: if kind.has_stream() { need(raw.stream, "stream")? } else { 0 },
                device: raw.dev.ok_or_else(|| self.error(format!("a {name} line without \"dev\"")))?,
                addr,
                size: need(raw.size, "size")?,
            }));
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_event().transpose()
    }
}

fn parse_addr(value: &serde_json::Value) -> Option<u64> {
    match value {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => {
            let hex = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
            u64::from_str_radix(hex, 16).ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, t: u64) -> Event {
        Event { time_ns: t, kind, pool: 2, stream: 7, device: 1, addr: 0x7f00_0000_1000, size: 4096 }
    }

    fn written(events: &[Event], end: bool) -> Vec<u8> {
        let header = Header::for_this_process(Some("host".into()), 5);
        let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
        for e in events {
            w.write_event(e).unwrap();
        }
        if end { w.finish(1000, 3).unwrap() } else { w.out }
    }

    fn read(bytes: &[u8]) -> Result<(Vec<Event>, Option<End>), TraceError> {
        let mut r = TraceReader::new(bytes, "t.jsonl")?;
        let events = r.by_ref().collect::<Result<Vec<_>, _>>()?;
        Ok((events, r.end().copied()))
    }

    #[test]
    fn every_kind_round_trips() {
        let events: Vec<Event> = EventKind::ALL
            .iter()
            .enumerate()
            .map(|(i, &k)| {
                let mut e = event(k, i as u64 * 10);
                if !k.has_stream() {
                    e.stream = 0;
                }
                if !k.has_addr() {
                    e.addr = 0;
                }
                e
            })
            .collect();
        let (back, end) = read(&written(&events, true)).unwrap();
        assert_eq!(back, events);
        assert_eq!(end, Some(End { time_ns: 1000, events: 7, dropped: 3 }));
    }

    #[test]
    fn times_never_go_backwards() {
        let bytes = written(&[event(EventKind::Alloc, 50), event(EventKind::FreeRequested, 40)], false);
        let (back, end) = read(&bytes).unwrap();
        assert_eq!(back[1].time_ns, 50);
        assert_eq!(end, None);
    }

    #[test]
    fn bad_input_names_file_line_and_offset() {
        let good = written(&[event(EventKind::Alloc, 1), event(EventKind::FreeRequested, 2)], true);
        let header_len = good.iter().position(|&b| b == b'\n').unwrap() as u64 + 1;
        // Truncated in the middle of the second event line.
        let line_starts: Vec<usize> =
            good.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1).collect();
        let cut = &good[..line_starts[1] + 20];
        let err = read(cut).unwrap_err();
        assert_eq!(err.file, "t.jsonl");
        assert_eq!(err.line, 3);
        assert!(err.message.contains("truncated"), "{err}");
        // Garbage on line 2.
        let mut garbage = good[..header_len as usize].to_vec();
        garbage.extend_from_slice(b"\x00\xffnot json\n");
        let err = read(&garbage).unwrap_err();
        assert_eq!((err.line, err.offset), (2, header_len));
        assert!(err.to_string().starts_with("t.jsonl: line 2 (byte offset "), "{err}");
        // A foreign file.
        let err = read(b"PK\x03\x04 zip data\n").unwrap_err();
        assert!(err.message.contains("not a hipmem trace"), "{err}");
        let err = read(b"{\"some\":\"json\"}\n").unwrap_err();
        assert!(err.message.contains("not a hipmem trace"), "{err}");
        // A newer version.
        let err = read(b"{\"format\":\"hipmem-trace\",\"version\":99}\n").unwrap_err();
        assert!(err.message.contains("version 99"), "{err}");
        // A missing field.
        let mut missing = good[..header_len as usize].to_vec();
        missing
            .extend_from_slice(b"{\"t\":1,\"e\":\"alloc\",\"pool\":1,\"stream\":0,\"dev\":0,\"size\":5}\n");
        let err = read(&missing).unwrap_err();
        assert!(err.message.contains("without \"addr\""), "{err}");
        // Empty.
        assert!(read(b"").unwrap_err().message.contains("empty"));
    }

    #[test]
    fn unknown_kinds_are_skipped_and_numbers_accepted_as_addresses() {
        let mut bytes = written(&[], false);
        bytes.extend_from_slice(b"{\"t\":1,\"e\":\"future_thing\",\"x\":1}\n");
        bytes.extend_from_slice(
            b"{\"t\":2,\"e\":\"alloc\",\"pool\":1,\"stream\":0,\"dev\":0,\"addr\":4096,\"size\":5}\n",
        );
        let mut r = TraceReader::new(&bytes[..], "t").unwrap();
        let events: Vec<_> = r.by_ref().collect::<Result<_, _>>().unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].addr, 4096);
        assert_eq!(r.skipped(), 1);
    }
}
