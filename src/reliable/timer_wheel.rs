//! The retransmit timers: a hashed timer wheel with O(1) check-in and check-out.
//!
//! usnic checks every sent segment into `opal_hotel` and checks it out when it
//! is ACKed or posted for retransmission. Here the timers are a fixed array of
//! rooms (an index-linked slab, no allocation after construction) hung off a
//! wheel of `slots` buckets of `tick` each. A room's bucket is its deadline's
//! tick modulo the wheel size, so deadlines beyond one turn of the wheel wait
//! for later turns. Check-in and check-out are O(1); [`TimerWheel::expire`] visits
//! only the buckets whose ticks have passed (all buckets at most once per call),
//! and returns at once while `now` is before a lower bound on every deadline
//! (a poll loop calls it every pass, thousands of times per expiry);
//! [`TimerWheel::next_deadline`] finds the earliest deadline exactly by walking the
//! occupancy bitmap from the cursor.

use crate::time::{duration_nanos, Instant};
use core::time::Duration;

const NIL: u32 = u32::MAX;

/// A checked-in timer; give it back to [`TimerWheel::check_out`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoomId(u32);

#[derive(Debug, Clone)]
struct Room {
    key: u64,
    deadline: Instant,
    tick: u64,
    prev: u32,
    next: u32,
    occupied: bool,
}

/// A timer wheel of a fixed number of rooms.
#[derive(Debug, Clone)]
pub struct TimerWheel {
    rooms: Vec<Room>,
    free: Vec<u32>,
    heads: Vec<u32>,
    occupancy: Vec<u64>,
    tick_ns: u64,
    mask: u64,
    cursor: u64,
    len: usize,
    /// No occupied room has a deadline before this.
    floor: Instant,
}

impl TimerWheel {
    /// A wheel of `rooms` rooms on a wheel of `slots` buckets (rounded up to a
    /// power of two, at least 64) of `tick` each (at least 1 ns).
    pub fn new(rooms: usize, slots: usize, tick: Duration) -> TimerWheel {
        let slots = slots.max(64).next_power_of_two();
        let rooms_n = rooms.min(NIL as usize - 1);
        TimerWheel {
            rooms: vec![
                Room {
                    key: 0,
                    deadline: Instant::ZERO,
                    tick: 0,
                    prev: NIL,
                    next: NIL,
                    occupied: false,
                };
                rooms_n
            ],
            free: (0..rooms_n as u32).rev().collect(),
            heads: vec![NIL; slots],
            occupancy: vec![0; slots / 64],
            tick_ns: duration_nanos(tick).max(1),
            mask: slots as u64 - 1,
            cursor: 0,
            len: 0,
            floor: Instant::MAX,
        }
    }

    /// Occupied rooms.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No room is occupied.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn slot_of(&self, tick: u64) -> usize {
        (tick & self.mask) as usize
    }

    fn link(&mut self, r: u32, slot: usize) {
        let head = self.heads[slot];
        self.rooms[r as usize].prev = NIL;
        self.rooms[r as usize].next = head;
        if head != NIL {
            self.rooms[head as usize].prev = r;
        }
        self.heads[slot] = r;
        self.occupancy[slot / 64] |= 1 << (slot % 64);
    }

    fn unlink(&mut self, r: u32) {
        let (prev, next, tick) = {
            let room = &self.rooms[r as usize];
            (room.prev, room.next, room.tick)
        };
        let slot = self.slot_of(tick);
        if prev == NIL {
            self.heads[slot] = next;
        } else {
            self.rooms[prev as usize].next = next;
        }
        if next != NIL {
            self.rooms[next as usize].prev = prev;
        }
        if self.heads[slot] == NIL {
            self.occupancy[slot / 64] &= !(1 << (slot % 64));
        }
        let room = &mut self.rooms[r as usize];
        room.occupied = false;
        room.prev = NIL;
        room.next = NIL;
        self.free.push(r);
        self.len -= 1;
    }

    /// Checks `key` in until `deadline`. `None` when every room is taken.
    pub fn check_in(&mut self, key: u64, deadline: Instant) -> Option<RoomId> {
        let r = self.free.pop()?;
        let tick = (deadline.as_nanos() / self.tick_ns).max(self.cursor);
        let room = &mut self.rooms[r as usize];
        room.key = key;
        room.deadline = deadline;
        room.tick = tick;
        room.occupied = true;
        self.len += 1;
        self.floor = self.floor.min(deadline);
        let slot = self.slot_of(tick);
        self.link(r, slot);
        Some(RoomId(r))
    }

    /// Checks a room out (stops its timer), returning its key; `None` if the
    /// room is not occupied (already expired or checked out).
    pub fn check_out(&mut self, room: RoomId) -> Option<u64> {
        let r = room.0;
        let rm = self.rooms.get(r as usize)?;
        if !rm.occupied {
            return None;
        }
        let key = rm.key;
        self.unlink(r);
        Some(key)
    }

    /// Expires the due rooms of `slot`; returns the earliest deadline left in it.
    fn expire_slot(&mut self, slot: usize, now: Instant, out: &mut Vec<u64>) -> Instant {
        let mut left = Instant::MAX;
        let mut r = self.heads[slot];
        while r != NIL {
            let room = &self.rooms[r as usize];
            let next = room.next;
            if room.deadline <= now {
                out.push(room.key);
                self.unlink(r);
            } else {
                left = left.min(room.deadline);
            }
            r = next;
        }
        left
    }

    fn slot_busy(&self, slot: usize) -> bool {
        self.occupancy[slot / 64] & (1 << (slot % 64)) != 0
    }

    /// Checks out every room whose deadline is at or before `now`, appending
    /// their keys to `out`. `now` must not go backwards.
    pub fn expire(&mut self, now: Instant, out: &mut Vec<u64>) {
        let now_tick = (now.as_nanos() / self.tick_ns).max(self.cursor);
        if now < self.floor {
            // Nothing is due: every room's tick is at or after `now_tick`, so
            // the cursor moves up without visiting a bucket.
            self.cursor = now_tick;
            return;
        }
        // Rooms in buckets not visited have ticks after `now_tick`.
        let mut floor = Instant::from_nanos((now_tick + 1).saturating_mul(self.tick_ns));
        if self.len > 0 {
            let span = now_tick - self.cursor;
            if span > self.mask {
                for slot in 0..=self.mask as usize {
                    if self.slot_busy(slot) {
                        floor = floor.min(self.expire_slot(slot, now, out));
                    }
                }
            } else {
                for t in self.cursor..=now_tick {
                    let slot = self.slot_of(t);
                    if self.slot_busy(slot) {
                        floor = floor.min(self.expire_slot(slot, now, out));
                    }
                }
            }
        }
        self.cursor = now_tick;
        self.floor = if self.len == 0 { Instant::MAX } else { floor };
    }

    /// The earliest deadline of any occupied room.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        let slots = self.mask + 1;
        let mut overall: Option<Instant> = None;
        let mut i = 0u64;
        while i < slots {
            let t = self.cursor + i;
            let slot = self.slot_of(t);
            // Skip empty buckets a word at a time.
            let word = self.occupancy[slot / 64] >> (slot % 64);
            if word == 0 {
                i += 64 - (slot % 64) as u64;
                continue;
            }
            let skip = u64::from(word.trailing_zeros());
            if skip > 0 {
                i += skip;
                continue;
            }
            let mut this_turn: Option<Instant> = None;
            let mut r = self.heads[slot];
            while r != NIL {
                let room = &self.rooms[r as usize];
                if room.tick == t {
                    this_turn = Some(this_turn.map_or(room.deadline, |d| d.min(room.deadline)));
                }
                overall = Some(overall.map_or(room.deadline, |d| d.min(room.deadline)));
                r = room.next;
            }
            if this_turn.is_some() {
                return this_turn;
            }
            i += 1;
        }
        overall
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn us(n: u64) -> Instant {
        Instant::from_micros(n)
    }

    #[test]
    fn check_in_expire_in_order() {
        let mut h = TimerWheel::new(16, 64, Duration::from_micros(10));
        let mut out = Vec::new();
        h.check_in(1, us(55)).unwrap();
        h.check_in(2, us(15)).unwrap();
        h.check_in(3, us(19)).unwrap();
        assert_eq!(h.next_deadline(), Some(us(15)));
        h.expire(us(14), &mut out);
        assert!(out.is_empty());
        h.expire(us(17), &mut out);
        assert_eq!(out, vec![2]);
        assert_eq!(h.next_deadline(), Some(us(19)));
        h.expire(us(60), &mut out);
        out.sort_unstable();
        assert_eq!(out, vec![1, 2, 3]);
        assert!(h.is_empty());
        assert_eq!(h.next_deadline(), None);
    }

    #[test]
    fn check_out_stops_the_timer() {
        let mut h = TimerWheel::new(4, 64, Duration::from_micros(1));
        let a = h.check_in(10, us(5)).unwrap();
        let b = h.check_in(11, us(5)).unwrap();
        assert_eq!(h.check_out(a), Some(10));
        assert_eq!(h.check_out(a), None);
        let mut out = Vec::new();
        h.expire(us(100), &mut out);
        assert_eq!(out, vec![11]);
        assert_eq!(h.check_out(b), None);
    }

    #[test]
    fn full_wheel_refuses() {
        let mut h = TimerWheel::new(2, 64, Duration::from_micros(1));
        assert!(h.check_in(1, us(1)).is_some());
        assert!(h.check_in(2, us(1)).is_some());
        assert!(h.check_in(3, us(1)).is_none());
    }

    #[test]
    fn beyond_one_turn_of_the_wheel() {
        // 64 slots of 1 us: a 1000 us deadline is many turns away.
        let mut h = TimerWheel::new(8, 64, Duration::from_micros(1));
        let mut out = Vec::new();
        h.check_in(7, us(1000)).unwrap();
        h.check_in(8, us(30)).unwrap();
        assert_eq!(h.next_deadline(), Some(us(30)));
        h.expire(us(40), &mut out);
        assert_eq!(out, vec![8]);
        assert_eq!(h.next_deadline(), Some(us(1000)));
        for t in (40..1000).step_by(7) {
            h.expire(us(t), &mut out);
        }
        assert_eq!(out, vec![8]);
        h.expire(us(1000), &mut out);
        assert_eq!(out, vec![8, 7]);
    }

    #[test]
    fn past_deadline_expires_at_once() {
        let mut h = TimerWheel::new(8, 64, Duration::from_micros(1));
        let mut out = Vec::new();
        h.expire(us(500), &mut out);
        h.check_in(1, us(3)).unwrap();
        assert_eq!(h.next_deadline(), Some(us(3)));
        h.expire(us(500), &mut out);
        assert_eq!(out, vec![1]);
    }

    proptest::proptest! {
        #[test]
        fn matches_a_naive_model(ops in proptest::collection::vec((0u8..3, 0u64..5000), 1..300)) {
            let mut h = TimerWheel::new(64, 64, Duration::from_micros(3));
            let mut model: Vec<(u64, Instant, RoomId)> = Vec::new();
            let mut now = 0u64;
            let mut key = 0u64;
            let mut out = Vec::new();
            for (op, arg) in ops {
                match op {
                    0 => {
                        let d = us(now + arg);
                        key += 1;
                        if let Some(r) = h.check_in(key, d) {
                            model.push((key, d, r));
                        } else {
                            proptest::prop_assert_eq!(model.len(), 64);
                        }
                    }
                    1 if !model.is_empty() => {
                        let (k, _, r) = model.swap_remove(arg as usize % model.len());
                        proptest::prop_assert_eq!(h.check_out(r), Some(k));
                    }
                    _ => {
                        now += arg / 4;
                        out.clear();
                        h.expire(us(now), &mut out);
                        let mut due: Vec<u64> = model.iter().filter(|m| m.1 <= us(now)).map(|m| m.0).collect();
                        model.retain(|m| m.1 > us(now));
                        out.sort_unstable();
                        due.sort_unstable();
                        proptest::prop_assert_eq!(&out, &due);
                    }
                }
                proptest::prop_assert_eq!(h.next_deadline(), model.iter().map(|m| m.1).min());
                proptest::prop_assert_eq!(h.len(), model.len());
            }
        }
    }
}
