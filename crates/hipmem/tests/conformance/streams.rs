//! Streams: creation flags, handles, synchronize/query, waiting on events,
//! the legacy null stream's semantics, destruction, and hipLaunchHostFunc.

use std::sync::{Arc, Mutex};

use hipmem::backend::RawStream;
use hipmem::{Stream, StreamFlags};

use crate::{
    DELAY, device, expect_err, non_blocking, private_runtime, read0, runtime, second_device, zeroed_flag,
};

#[test]
fn stream_flags_parse_from_their_bits() {
    assert_eq!(StreamFlags::from_bits(0).unwrap(), StreamFlags::default());
    assert!(!StreamFlags::from_bits(StreamFlags::DEFAULT).unwrap().non_blocking);
    assert!(StreamFlags::from_bits(StreamFlags::NON_BLOCKING).unwrap().non_blocking);
    assert_eq!(StreamFlags::DEFAULT, 0);
    assert_eq!(StreamFlags::NON_BLOCKING, 1);
    for bits in [0, 1] {
        assert_eq!(StreamFlags::from_bits(bits).unwrap().bits(), bits);
    }
    for bad in [2u32, 3, 4, 0x100, 0x8000_0000, u32::MAX] {
        expect_err(StreamFlags::from_bits(bad), 1, &["unknown", &format!("{bad:#x}")]);
    }
}

#[test]
fn created_streams_know_their_flags_device_and_identity() {
    let dev = device(0);
    let a = dev.create_stream().unwrap();
    let b = dev.create_stream_with_flags(non_blocking()).unwrap();
    let c = dev.create_stream_with_flags(StreamFlags::default()).unwrap();
    assert!(!a.flags().non_blocking);
    assert!(b.flags().non_blocking);
    assert!(!c.flags().non_blocking);
    for s in [&a, &b, &c] {
        assert_eq!(s.device(), 0);
        assert!(!s.is_null());
        assert!(!s.raw().is_null());
        assert_eq!(s.runtime().device_count(), runtime().device_count());
    }
    assert_ne!(a.id(), b.id());
    assert_ne!(b.id(), c.id());
    assert_ne!(a.raw(), b.raw());
    let a2 = a.clone();
    assert_eq!(a2.id(), a.id());
    assert_eq!(a2.raw(), a.raw());
    // A fresh stream has nothing to do.
    assert!(a.query().unwrap());
    a.synchronize().unwrap();
}

#[test]
fn the_null_stream_is_handle_zero_and_blocking() {
    for ordinal in 0..runtime().device_count() {
        let null = device(ordinal).null_stream();
        assert!(null.is_null());
        assert_eq!(null.raw(), RawStream::null(ordinal));
        assert_eq!(null.device(), ordinal);
        assert!(!null.flags().non_blocking);
        null.synchronize().unwrap();
        let found = Stream::from_raw(runtime(), RawStream::null(ordinal)).unwrap();
        assert!(found.is_null());
        assert_eq!(found.device(), ordinal);
    }
}

#[test]
fn query_is_false_while_work_is_pending_and_synchronize_waits_for_it() {
    let dev = device(0);
    for flags in [StreamFlags::default(), non_blocking()] {
        let stream = dev.create_stream_with_flags(flags).unwrap();
        let flag = zeroed_flag(&dev);
        let t0 = std::time::Instant::now();
        stream.delay(DELAY, &flag, 7).unwrap();
        assert_pending!(
            t0,
            !stream.query().unwrap(),
            "hipStreamQuery is true right after queuing a delay ({flags:?})"
        );
        stream.synchronize().unwrap();
        assert!(stream.query().unwrap(), "hipStreamQuery is false after hipStreamSynchronize");
        assert_eq!(read0(&flag), 7);
    }
}

#[test]
fn work_in_one_stream_runs_in_the_order_queued() {
    let dev = device(0);
    let stream = dev.create_stream_with_flags(non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let out = zeroed_flag(&dev);
    let out2 = zeroed_flag(&dev);
    stream.delay(DELAY, &flag, 7).unwrap();
    stream.copy_device_to_device(&flag, &out).unwrap();
    stream.fill(&flag, 8).unwrap();
    stream.copy_device_to_device(&flag, &out2).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(read0(&out), 7, "a copy overtook the kernel queued before it");
    assert_eq!(read0(&out2), 8, "a copy overtook the fill queued before it");
    assert_eq!(read0(&flag), 8);
}

/// hipStreamWaitEvent: later work of the waiting stream sees what was done
/// before the event on the other stream.
#[test]
fn a_stream_waiting_on_an_event_sees_the_work_before_it() {
    let dev = device(0);
    let producer = dev.create_stream_with_flags(non_blocking()).unwrap();
    let consumer = dev.create_stream_with_flags(non_blocking()).unwrap();
    let event = dev.create_event().unwrap();
    let flag = zeroed_flag(&dev);
    let out = zeroed_flag(&dev);
    let t0 = std::time::Instant::now();
    producer.delay(DELAY, &flag, 7).unwrap();
    producer.record_event(&event).unwrap();
    consumer.wait_event(&event).unwrap();
    consumer.copy_device_to_device(&flag, &out).unwrap();
    assert_pending!(t0, !consumer.query().unwrap(), "the waiting stream did not wait for the event");
    assert_pending!(t0, !event.query().unwrap(), "the event behind the delay completed at once");
    consumer.synchronize().unwrap();
    assert!(event.query().unwrap(), "the waiting stream finished before the event completed");
    assert_eq!(read0(&out), 7, "the copy after hipStreamWaitEvent ran before the event's work");
}

/// `CoreStream::wait_for` (PyTorch's `wait_stream`): later work of the
/// waiting stream sees everything queued on the other stream before the
/// call, and nothing queued there after it (its event goes back to the pool
/// at once and is recorded again elsewhere without effect on the wait).
#[test]
fn a_stream_waiting_for_another_sees_the_work_queued_there_before() {
    let dev = device(0);
    let producer = dev.create_stream_with_flags(non_blocking()).unwrap();
    let consumer = dev.create_stream_with_flags(non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let out = zeroed_flag(&dev);
    let later = zeroed_flag(&dev);
    let t0 = std::time::Instant::now();
    producer.delay(DELAY, &flag, 7).unwrap();
    consumer.wait_for(&producer).unwrap();
    consumer.wait_for(&consumer).unwrap(); // itself: nothing to do
    consumer.copy_device_to_device(&flag, &out).unwrap();
    assert_pending!(t0, !consumer.query().unwrap(), "the waiting stream did not wait");
    consumer.synchronize().unwrap();
    assert_eq!(read0(&out), 7, "the copy ran before the work it waited for");
    // Work queued on the producer after the call is not waited for.
    let t1 = std::time::Instant::now();
    let other = dev.create_stream_with_flags(non_blocking()).unwrap();
    other.wait_for(&producer).unwrap();
    producer.delay(DELAY, &later, 9).unwrap();
    consumer.wait_for(&other).unwrap(); // the pooled event is recorded again, on `other`
    other.fill(&out, 5).unwrap();
    other.synchronize().unwrap();
    assert_pending!(t1, !producer.query().unwrap(), "the waiting stream waited for later work");
    assert_eq!(read0(&out), 5);
    producer.synchronize().unwrap();
    assert_eq!(read0(&later), 9);
}

#[test]
fn waiting_on_a_never_recorded_event_does_not_block() {
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let event = dev.create_event().unwrap();
    let buf = dev.alloc_zeroed::<u32>(4).unwrap();
    stream.wait_event(&event).unwrap();
    stream.fill(&buf, 3).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(buf.to_vec().unwrap(), vec![3; 4]);
}

/// Waiting on an event captures its record at the time of the call: a later
/// re-record does not change what the stream waits for.
#[test]
fn wait_event_captures_the_latest_record_at_the_time_of_the_call() {
    let dev = device(0);
    let a = dev.create_stream_with_flags(non_blocking()).unwrap();
    let b = dev.create_stream_with_flags(non_blocking()).unwrap();
    let event = dev.create_event().unwrap();
    let buf = dev.alloc_zeroed::<u32>(1).unwrap();
    let flag = zeroed_flag(&dev);
    event.record(&a).unwrap(); // nothing before it: completes at once
    event.synchronize().unwrap();
    b.wait_event(&event).unwrap();
    let t0 = std::time::Instant::now();
    a.delay(DELAY, &flag, 1).unwrap();
    event.record(&a).unwrap(); // re-recorded behind a delay
    b.fill(&buf, 4).unwrap();
    b.synchronize().unwrap();
    assert_pending!(t0, !event.query().unwrap(), "b waited for a record made after its hipStreamWaitEvent");
    assert_eq!(read0(&buf), 4);
    a.synchronize().unwrap();
}

#[test]
fn stream_from_raw_finds_live_streams_and_rejects_dead_ones() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = dev.create_stream_with_flags(non_blocking()).unwrap();
    let raw = s.raw();
    let found = Stream::from_raw(&rt, raw).unwrap();
    assert_eq!(found.id(), s.id());
    assert_eq!(found.raw(), raw);
    assert!(found.flags().non_blocking);
    let null = Stream::from_raw(&rt, RawStream::null(0)).unwrap();
    assert!(null.is_null());
    drop(found);
    drop(s);
    expect_err(Stream::from_raw(&rt, raw), 400, &["destroyed"]);
    // A handle that never existed.
    expect_err(Stream::from_raw(&rt, RawStream { device: 0, handle: 0x000d_eadb_eef0 }), 400, &[]);
    // A live stream of another runtime is not a stream of this one.
    let other = runtime().device(0).unwrap().create_stream().unwrap();
    expect_err(Stream::from_raw(&rt, other.raw()), 400, &[]);
    let errors = rt.take_drop_errors();
    assert!(errors.is_empty(), "destroying the stream recorded {errors:?}");
}

#[test]
fn stream_from_raw_rejects_a_handle_with_the_wrong_device() {
    let Some(_) = second_device("stream_from_raw_rejects_a_handle_with_the_wrong_device") else {
        return;
    };
    let rt = private_runtime();
    let s = rt.device(0).unwrap().create_stream().unwrap();
    let wrong = RawStream { device: 1, handle: s.raw().handle };
    expect_err(Stream::from_raw(&rt, wrong), 400, &[]);
}

/// Destroying a stream (dropping its last handle) lets its queued work run
/// to completion.
#[test]
fn dropping_a_stream_lets_its_queued_work_finish() {
    let dev = device(0);
    let flag = zeroed_flag(&dev);
    let buf = dev.alloc_zeroed::<u32>(64).unwrap();
    let stream = dev.create_stream_with_flags(non_blocking()).unwrap();
    let event = dev.create_event().unwrap();
    let t0 = std::time::Instant::now();
    stream.delay(DELAY, &flag, 7).unwrap();
    stream.fill(&buf, 5).unwrap();
    event.record(&stream).unwrap();
    drop(stream);
    assert_pending!(t0, !event.query().unwrap(), "work of the destroyed stream finished at once");
    event.synchronize().unwrap();
    assert_eq!(read0(&flag), 7);
    assert_eq!(buf.to_vec().unwrap(), vec![5; 64]);
}

// ---- the legacy null stream ------------------------------------------------------

/// A blocking stream's work waits for null-stream work queued before it.
#[test]
fn a_blocking_stream_waits_for_earlier_null_stream_work() {
    let dev = device(0);
    let flag = zeroed_flag(&dev);
    let out = zeroed_flag(&dev);
    let blocking = dev.create_stream().unwrap();
    let null = dev.null_stream();
    let t0 = std::time::Instant::now();
    null.delay(DELAY, &flag, 7).unwrap();
    blocking.copy_device_to_device(&flag, &out).unwrap();
    assert_pending!(t0, !blocking.query().unwrap(), "the blocking stream did not wait for the null stream");
    blocking.synchronize().unwrap();
    assert_eq!(read0(&out), 7, "blocking-stream work overtook earlier null-stream work");
}

/// Null-stream work waits for blocking-stream work queued before it.
#[test]
fn the_null_stream_waits_for_earlier_blocking_stream_work() {
    let dev = device(0);
    let flag = zeroed_flag(&dev);
    let out = zeroed_flag(&dev);
    let blocking = dev.create_stream().unwrap();
    let null = dev.null_stream();
    let t0 = std::time::Instant::now();
    blocking.delay(DELAY, &flag, 9).unwrap();
    null.copy_device_to_device(&flag, &out).unwrap();
    assert_pending!(t0, !null.query().unwrap(), "the null stream reports idle while a blocking stream runs");
    null.synchronize().unwrap();
    assert!(blocking.query().unwrap(), "null-stream synchronize returned before a blocking stream");
    assert_eq!(read0(&out), 9, "null-stream work overtook earlier blocking-stream work");
    // A synchronous copy (hipMemcpy) is null-stream work too.
    let flag2 = zeroed_flag(&dev);
    blocking.delay(DELAY, &flag2, 11).unwrap();
    assert_eq!(read0(&flag2), 11, "hipMemcpy did not wait for a blocking stream's earlier work");
    // And so is a synchronous host-to-device copy: it lands after the
    // blocking stream's kernel, not before it (where the kernel would
    // overwrite it).
    let flag3 = zeroed_flag(&dev);
    blocking.delay(DELAY, &flag3, 13).unwrap();
    runtime().copy_host_to_device(flag3.device_ptr(), &3u32.to_ne_bytes()).unwrap();
    assert!(blocking.query().unwrap(), "hipMemcpy returned before a blocking stream's earlier work");
    blocking.synchronize().unwrap();
    assert_eq!(read0(&flag3), 3, "a blocking stream's earlier kernel overwrote the later hipMemcpy");
}

/// A non-blocking stream does not wait for the null stream.
#[test]
fn a_non_blocking_stream_does_not_wait_for_the_null_stream() {
    let dev = device(0);
    let flag = zeroed_flag(&dev);
    let out = dev.alloc_zeroed::<u32>(1).unwrap();
    let filled = dev.alloc_zeroed::<u32>(16).unwrap();
    let nb = dev.create_stream_with_flags(non_blocking()).unwrap();
    let null_done = dev.create_event().unwrap();
    let null = dev.null_stream();
    let t0 = std::time::Instant::now();
    null.delay(DELAY, &flag, 7).unwrap();
    null_done.record(&null).unwrap();
    nb.copy_device_to_device(&flag, &out).unwrap();
    nb.fill(&filled, 2).unwrap();
    nb.synchronize().unwrap();
    // The copy had completed by now: if that was well within the delay,
    // it ran before the null-stream kernel wrote its flag.
    let copied_within_delay = t0.elapsed() < DELAY / 2;
    assert_pending!(
        t0,
        !null_done.query().unwrap(),
        "the non-blocking stream waited for the null stream's delay"
    );
    null_done.synchronize().unwrap();
    if copied_within_delay {
        assert_eq!(read0(&out), 0, "the non-blocking stream's copy ran after the null-stream kernel");
    } else {
        eprintln!("note: the host stalled past the delay; not checking the copy's order");
    }
    assert_eq!(filled.to_vec().unwrap(), vec![2; 16]);
    assert_eq!(read0(&flag), 7);
}

// ---- hipLaunchHostFunc ---------------------------------------------------------

#[test]
fn host_functions_run_in_stream_order() {
    let dev = device(0);
    let stream = dev.create_stream_with_flags(non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..5 {
        let log = Arc::clone(&log);
        stream.launch_host_func(move || log.lock().unwrap().push(i)).unwrap();
    }
    let t0 = std::time::Instant::now();
    stream.delay(DELAY, &flag, 1).unwrap();
    for i in 5..10 {
        let log = Arc::clone(&log);
        stream.launch_host_func(move || log.lock().unwrap().push(i)).unwrap();
    }
    let seen = log.lock().unwrap().clone();
    assert_pending!(t0, seen.len() <= 5, "host functions queued behind a delay ran early: {seen:?}");
    stream.synchronize().unwrap();
    assert_eq!(*log.lock().unwrap(), (0..10).collect::<Vec<_>>());
}

#[test]
fn a_host_function_runs_after_earlier_device_work() {
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let flag = zeroed_flag(&dev);
    let ran = Arc::new(Mutex::new(false));
    let t0 = std::time::Instant::now();
    stream.delay(DELAY, &flag, 7).unwrap();
    let r = Arc::clone(&ran);
    stream.launch_host_func(move || *r.lock().unwrap() = true).unwrap();
    assert!(!*ran.lock().unwrap(), "the host function ran before the kernel queued ahead of it");
    assert_pending!(t0, !stream.query().unwrap(), "queued work finished at once");
    stream.synchronize().unwrap();
    assert!(*ran.lock().unwrap(), "hipStreamSynchronize returned before the host function ran");
}

#[test]
fn host_functions_on_the_null_stream_and_across_streams_keep_event_order() {
    let dev = device(0);
    let log = Arc::new(Mutex::new(Vec::new()));
    let first = dev.create_stream_with_flags(non_blocking()).unwrap();
    let second = dev.create_stream_with_flags(non_blocking()).unwrap();
    let event = dev.create_event().unwrap();
    let flag = zeroed_flag(&dev);
    first.delay(DELAY, &flag, 1).unwrap();
    let l = Arc::clone(&log);
    first.launch_host_func(move || l.lock().unwrap().push("first")).unwrap();
    event.record(&first).unwrap();
    second.wait_event(&event).unwrap();
    let l = Arc::clone(&log);
    second.launch_host_func(move || l.lock().unwrap().push("second")).unwrap();
    second.synchronize().unwrap();
    assert_eq!(*log.lock().unwrap(), vec!["first", "second"]);

    let null = dev.null_stream();
    let l = Arc::clone(&log);
    null.launch_host_func(move || l.lock().unwrap().push("null")).unwrap();
    null.synchronize().unwrap();
    assert_eq!(log.lock().unwrap().last(), Some(&"null"));
}

#[test]
fn device_one_streams_work_independently() {
    let Some(dev1) = second_device("device_one_streams_work_independently") else {
        return;
    };
    let dev0 = device(0);
    let s0 = dev0.create_stream().unwrap();
    let s1 = dev1.create_stream_with_flags(non_blocking()).unwrap();
    let f0 = zeroed_flag(&dev0);
    let b1 = dev1.alloc_zeroed::<u32>(8).unwrap();
    let t0 = std::time::Instant::now();
    s0.delay(DELAY, &f0, 1).unwrap();
    s1.fill(&b1, 6).unwrap();
    s1.synchronize().unwrap();
    assert_pending!(t0, !s0.query().unwrap(), "device 1's stream waited for device 0's stream");
    assert_eq!(b1.to_vec().unwrap(), vec![6; 8]);
    s0.synchronize().unwrap();
    assert_eq!(read0(&f0), 1);
}
