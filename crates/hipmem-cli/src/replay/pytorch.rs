//! PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`), read
//! without Python: a pickled dict whose `device_traces` is one list per
//! device of trace entries `{action, addr, size, stream, time_us, frames, ...}`
//! (`alloc`, `free_requested`, `free_completed`, `segment_alloc`,
//! `segment_free`, `segment_map`, `segment_unmap`, `oom` with `device_free`
//! instead of `addr`, `snapshot`, ...), and whose `segments` describe the
//! caching allocator's memory when the snapshot was taken.

use std::collections::BTreeMap;

use hipmem::trace::{Event, EventKind};
use serde_pickle::{DeOptions, HashableValue, Value};

/// A snapshot's trace as hipmem events.
pub struct Snapshot {
    /// The entries replay and summary use, merged across devices in time order.
    pub events: Vec<Event>,
    /// Devices with a trace list.
    pub devices: usize,
    /// Entries of other actions.
    pub other_entries: u64,
    /// The allocator's reserved bytes at the snapshot (sum of its segments).
    pub final_reserved: Option<u64>,
}

fn key<'a>(dict: &'a BTreeMap<HashableValue, Value>, name: &str) -> Option<&'a Value> {
    dict.get(&HashableValue::String(name.to_string()))
}

fn int(value: &Value) -> Option<i128> {
    match value {
        Value::I64(n) => Some(*n as i128),
        Value::Int(big) => big.to_string().parse().ok(),
        Value::Bool(b) => Some(*b as i128),
        _ => None,
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::None => "None",
        Value::Bool(_) => "a bool",
        Value::I64(_) | Value::Int(_) => "an int",
        Value::F64(_) => "a float",
        Value::Bytes(_) => "bytes",
        Value::String(_) => "a str",
        Value::List(_) => "a list",
        Value::Tuple(_) => "a tuple",
        Value::Set(_) | Value::FrozenSet(_) => "a set",
        Value::Dict(_) => "a dict",
    }
}

/// Reads the snapshot in `bytes`; `name` names the file in errors.
pub fn read_snapshot(bytes: &[u8], name: &str) -> Result<Snapshot, String> {
    // serde-pickle refuses a shared value nested in another shared value (it
    // takes it for a cycle); such values can only be frames here, which are
    // not used: they read as None.
    let value = serde_pickle::value_from_slice(bytes, DeOptions::new().replace_recursive_structures())
        .map_err(|e| format!("{name}: not a readable pickle: {e}"))?;
    let not_snapshot = |why: String| format!("{name}: a pickle, but not a PyTorch memory snapshot: {why}");
    let Value::Dict(top) = &value else {
        return Err(not_snapshot(format!("it holds {}, not a dict", kind_of(&value))));
    };
    let Some(traces) = key(top, "device_traces") else {
        return Err(not_snapshot("it has no 'device_traces' (record with torch.cuda.memory._record_memory_history() before dumping)".into()));
    };
    let Value::List(devices) = traces else {
        return Err(not_snapshot(format!("'device_traces' is {}, not a list", kind_of(traces))));
    };
    let mut events: Vec<(i128, usize, Event)> = Vec::new();
    let mut other_entries = 0;
    for (device, entries) in devices.iter().enumerate() {
        let Value::List(entries) = entries else {
            return Err(not_snapshot(format!("device_traces[{device}] is {}, not a list", kind_of(entries))));
        };
        for (i, entry) in entries.iter().enumerate() {
            let at = |why: String| format!("{name}: device_traces[{device}][{i}]: {why}");
            let Value::Dict(entry) = entry else {
                return Err(at(format!("the entry is {}, not a dict", kind_of(entry))));
            };
            let action = match key(entry, "action") {
                Some(Value::String(s)) => s.as_str(),
                Some(other) => return Err(at(format!("'action' is {}, not a str", kind_of(other)))),
                None => return Err(at("no 'action'".into())),
            };
            let kind = match action {
                "alloc" => EventKind::Alloc,
                "free_requested" => EventKind::FreeRequested,
                "free_completed" => EventKind::FreeCompleted,
                "segment_alloc" | "segment_map" => EventKind::PoolGrow,
                "segment_free" | "segment_unmap" => EventKind::PoolRelease,
                "oom" => EventKind::Oom,
                _ => {
                    other_entries += 1;
                    continue;
                }
            };
            let number = |field: &str| -> Result<u64, String> {
                let v =
                    key(entry, field).ok_or_else(|| at(format!("a '{action}' entry without '{field}'")))?;
                let n = int(v).ok_or_else(|| at(format!("'{field}' is {}, not an int", kind_of(v))))?;
                u64::try_from(n).map_err(|_| at(format!("'{field}' is {n}, out of range")))
            };
            let size = number("size")?;
            let addr = if kind == EventKind::Oom { 0 } else { number("addr")? };
            // Streams are raw CUDA stream handles (0: the legacy default stream).
            let stream = match key(entry, "stream") {
                Some(v) => {
                    int(v).ok_or_else(|| at(format!("'stream' is {}, not an int", kind_of(v))))? as u64
                }
                None => 0,
            };
            let time_us = match key(entry, "time_us") {
                Some(v) => int(v).unwrap_or(0),
                None => 0,
            };
            events.push((
                time_us,
                events.len(),
                Event { time_ns: 0, kind, pool: 0, stream, device: device as u32, addr, size },
            ));
        }
    }
    // Merge the devices' lists in time order (stable: equal times keep their order).
    events.sort_by_key(|&(t, order, _)| (t, order));
    let first = events.first().map(|&(t, _, _)| t).unwrap_or(0);
    let events = events
        .into_iter()
        .map(|(t, _, mut e)| {
            e.time_ns = u64::try_from((t - first).max(0)).unwrap_or(u64::MAX / 1000).saturating_mul(1000);
            e
        })
        .collect();
    let final_reserved = match key(top, "segments") {
        Some(Value::List(segments)) => {
            let mut total = 0u64;
            for s in segments {
                if let Value::Dict(s) = s {
                    if let Some(size) = key(s, "total_size").and_then(int) {
                        total += u64::try_from(size).unwrap_or(0);
                    }
                }
            }
            Some(total)
        }
        _ => None,
    };
    Ok(Snapshot { events, devices: devices.len(), other_entries, final_reserved })
}
