//! Events: flags, record, query, synchronize, elapsed time and its errors.

use hipmem::EventFlags;

use crate::{DELAY, device, expect_err, non_blocking, read0, second_device, zeroed_flag};

#[test]
fn event_flags_parse_from_their_bits() {
    assert_eq!(EventFlags::BLOCKING_SYNC, 1);
    assert_eq!(EventFlags::DISABLE_TIMING, 2);
    assert_eq!(EventFlags::INTERPROCESS, 4);
    assert_eq!(EventFlags::from_bits(0).unwrap(), EventFlags::default());
    let f = EventFlags::from_bits(1).unwrap();
    assert!(f.blocking_sync && !f.disable_timing && !f.interprocess);
    let f = EventFlags::from_bits(2).unwrap();
    assert!(!f.blocking_sync && f.disable_timing && !f.interprocess);
    let f = EventFlags::from_bits(6).unwrap();
    assert!(!f.blocking_sync && f.disable_timing && f.interprocess);
    for bits in [0u32, 1, 2, 3, 6, 7] {
        assert_eq!(EventFlags::from_bits(bits).unwrap().bits(), bits);
    }
}

#[test]
fn bad_event_flags_are_invalid_value() {
    // Interprocess needs DisableTiming.
    for bits in [4u32, 5] {
        expect_err(EventFlags::from_bits(bits), 1, &["DisableTiming"]);
    }
    for bits in [8u32, 9, 0x10, 0x100, 0x8000_0000, u32::MAX] {
        expect_err(EventFlags::from_bits(bits), 1, &["unknown"]);
    }
}

/// The flags struct has public fields, so an invalid combination can be
/// built without `from_bits`; creating an event from it must still be
/// refused (hipEventCreateWithFlags(hipEventInterprocess) is InvalidValue).
#[test]
fn creating_an_interprocess_event_without_disable_timing_is_invalid_value() {
    let flags = EventFlags { interprocess: true, ..EventFlags::default() };
    expect_err(device(0).create_event_with_flags(flags), 1, &["DisableTiming"]);
}

#[test]
fn events_know_their_flags_and_device() {
    for ordinal in 0..crate::runtime().device_count() {
        let dev = device(ordinal);
        for bits in [0u32, 1, 2, 3, 6, 7] {
            let flags = EventFlags::from_bits(bits).unwrap();
            let event = dev.create_event_with_flags(flags).unwrap();
            assert_eq!(event.flags(), flags);
            assert_eq!(event.device(), ordinal);
            assert_eq!(event.raw().device, ordinal);
        }
        assert_eq!(dev.create_event().unwrap().flags(), EventFlags::default());
    }
}

#[test]
fn a_never_recorded_event_counts_as_complete() {
    let event = device(0).create_event().unwrap();
    assert!(event.query().unwrap());
    event.synchronize().unwrap();
    let clone = event.clone();
    assert!(clone.query().unwrap());
}

#[test]
fn an_event_after_pending_work_is_not_complete_until_the_work_is() {
    let dev = device(0);
    for flags in [EventFlags::default(), EventFlags::from_bits(3).unwrap()] {
        let stream = dev.create_stream_with_flags(non_blocking()).unwrap();
        let flag = zeroed_flag(&dev);
        let event = dev.create_event_with_flags(flags).unwrap();
        let t0 = std::time::Instant::now();
        stream.delay(DELAY, &flag, 7).unwrap();
        event.record(&stream).unwrap();
        assert_pending!(
            t0,
            !event.query().unwrap(),
            "event recorded behind a delay is complete at once ({flags:?})"
        );
        event.synchronize().unwrap();
        assert!(event.query().unwrap());
        assert_eq!(read0(&flag), 7, "hipEventSynchronize returned before the work before the event");
    }
}

#[test]
fn re_recording_an_event_makes_it_pending_again() {
    let dev = device(0);
    let stream = dev.create_stream_with_flags(non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let event = dev.create_event().unwrap();
    event.record(&stream).unwrap();
    event.synchronize().unwrap();
    assert!(event.query().unwrap());
    let t0 = std::time::Instant::now();
    stream.delay(DELAY, &flag, 2).unwrap();
    stream.record_event(&event).unwrap();
    assert_pending!(t0, !event.query().unwrap(), "the re-recorded event still reports its old record");
    event.synchronize().unwrap();
    assert_eq!(read0(&flag), 2);
}

#[test]
fn events_on_the_null_stream_follow_legacy_ordering() {
    let dev = device(0);
    let blocking = dev.create_stream().unwrap();
    let flag = zeroed_flag(&dev);
    let event = dev.create_event().unwrap();
    let t0 = std::time::Instant::now();
    blocking.delay(DELAY, &flag, 5).unwrap();
    event.record(&dev.null_stream()).unwrap();
    assert_pending!(
        t0,
        !event.query().unwrap(),
        "a null-stream event did not wait for a blocking stream's work"
    );
    event.synchronize().unwrap();
    assert!(blocking.query().unwrap());
    assert_eq!(read0(&flag), 5);
}

#[test]
fn elapsed_time_covers_the_work_between_two_events() {
    let dev = device(0);
    let stream = dev.create_stream_with_flags(non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let (start, end) = (dev.create_event().unwrap(), dev.create_event().unwrap());
    start.record(&stream).unwrap();
    stream.delay(DELAY, &flag, 1).unwrap();
    end.record(&stream).unwrap();
    end.synchronize().unwrap();
    let ms = start.elapsed_ms(&end).unwrap();
    let want = DELAY.as_secs_f32() * 1e3;
    assert!(ms >= want * 0.95, "elapsed {ms} ms across a {want} ms delay");
    assert!(ms < 60_000.0, "elapsed {ms} ms is absurd");
    assert!(ms.is_finite());
    // An event against itself.
    assert_eq!(end.elapsed_ms(&end).unwrap(), 0.0);
}

#[test]
fn elapsed_time_with_a_disable_timing_event_is_invalid_handle() {
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let timed = dev.create_event().unwrap();
    let untimed =
        dev.create_event_with_flags(EventFlags::from_bits(EventFlags::DISABLE_TIMING).unwrap()).unwrap();
    timed.record(&stream).unwrap();
    untimed.record(&stream).unwrap();
    stream.synchronize().unwrap();
    expect_err(timed.elapsed_ms(&untimed), 400, &[]);
    expect_err(untimed.elapsed_ms(&timed), 400, &[]);
    expect_err(untimed.elapsed_ms(&untimed), 400, &[]);
}

#[test]
fn elapsed_time_with_a_never_recorded_event_is_invalid_handle() {
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let recorded = dev.create_event().unwrap();
    let never = dev.create_event().unwrap();
    recorded.record(&stream).unwrap();
    stream.synchronize().unwrap();
    expect_err(recorded.elapsed_ms(&never), 400, &[]);
    expect_err(never.elapsed_ms(&recorded), 400, &[]);
    expect_err(never.elapsed_ms(&never), 400, &[]);
}

#[test]
fn elapsed_time_with_an_incomplete_event_is_not_ready() {
    let dev = device(0);
    let stream = dev.create_stream_with_flags(non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let (start, end) = (dev.create_event().unwrap(), dev.create_event().unwrap());
    start.record(&stream).unwrap();
    start.synchronize().unwrap();
    let queued = std::time::Instant::now();
    stream.delay(DELAY, &flag, 1).unwrap();
    end.record(&stream).unwrap();
    let (forward, backward) = (start.elapsed_ms(&end), end.elapsed_ms(&start));
    // Only while the delay can still be running (on CUDA another test's
    // cuMemFree can hold this thread's driver calls until the device is idle).
    assert_pending!(queued, forward.is_err() && backward.is_err(), "elapsed time of an unfinished event");
    for result in [forward, backward] {
        if result.is_err() {
            expect_err(result, 600, &[]);
        }
    }
    end.synchronize().unwrap();
    assert!(start.elapsed_ms(&end).unwrap() > 0.0);
}

#[test]
fn recording_an_event_on_another_devices_stream_is_invalid_handle() {
    let Some(dev1) = second_device("recording_an_event_on_another_devices_stream_is_invalid_handle") else {
        return;
    };
    let event0 = device(0).create_event().unwrap();
    let s1 = dev1.create_stream().unwrap();
    expect_err(event0.record(&s1), 400, &[]);
    expect_err(event0.record(&dev1.null_stream()), 400, &[]);
    assert!(event0.query().unwrap(), "the failed record changed the event");
}

#[test]
fn a_stream_can_wait_on_an_event_of_another_device() {
    let Some(dev1) = second_device("a_stream_can_wait_on_an_event_of_another_device") else {
        return;
    };
    let dev0 = device(0);
    let s0 = dev0.create_stream_with_flags(non_blocking()).unwrap();
    let s1 = dev1.create_stream_with_flags(non_blocking()).unwrap();
    let event0 = dev0.create_event().unwrap();
    let flag0 = zeroed_flag(&dev0);
    let buf1 = dev1.alloc_zeroed::<u32>(4).unwrap();
    let t0 = std::time::Instant::now();
    s0.delay(DELAY, &flag0, 1).unwrap();
    event0.record(&s0).unwrap();
    s1.wait_event(&event0).unwrap();
    s1.fill(&buf1, 8).unwrap();
    assert_pending!(t0, !s1.query().unwrap(), "device 1's stream did not wait for device 0's event");
    s1.synchronize().unwrap();
    assert!(event0.query().unwrap(), "device 1's stream finished before the event it waits on");
    assert_eq!(buf1.to_vec().unwrap(), vec![8; 4]);
}
