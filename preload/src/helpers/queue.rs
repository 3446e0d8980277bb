//! The bounded multi-producer queue (Vyukov's) through which the program's threads hand
//! work to a helper thread without a lock or an allocation. A full queue refuses the
//! item: the caller then does without the helper (skips a prefetch, or does the work
//! itself).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Cell<T> {
    /// Lap counter, relative to the cell's index: `pos - index` when free for the producer
    /// at `pos`, `pos + 1 - index` when holding its item.
    seq: AtomicUsize,
    item: UnsafeCell<T>,
}

/// What a free cell holds.
pub trait Empty: Copy {
    const EMPTY: Self;
}

pub struct Queue<T: Empty, const N: usize> {
    cells: [Cell<T>; N],
    head: AtomicUsize,
    tail: AtomicUsize,
}

// SAFETY: a cell's item is written only by the producer that won its position and read
// only by the consumer after the producer published it through `seq`.
unsafe impl<T: Empty + Send, const N: usize> Sync for Queue<T, N> {}

impl<T: Empty, const N: usize> Queue<T, N> {
    pub const fn new() -> Queue<T, N> {
        Queue {
            cells: [const {
                Cell {
                    seq: AtomicUsize::new(0),
                    item: UnsafeCell::new(T::EMPTY),
                }
            }; N],
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }

    pub fn push(&self, item: T) -> bool {
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos % N];
            let seq = cell.seq.load(Ordering::Acquire).wrapping_add(pos % N);
            let dif = seq.wrapping_sub(pos) as isize;
            if dif == 0 {
                match self.head.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: this producer owns the cell until it publishes it.
                        unsafe { *cell.item.get() = item };
                        cell.seq
                            .store(pos.wrapping_add(1).wrapping_sub(pos % N), Ordering::Release);
                        return true;
                    }
                    Err(p) => pos = p,
                }
            } else if dif < 0 {
                return false;
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }

    pub fn pop(&self) -> Option<T> {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos % N];
            let seq = cell.seq.load(Ordering::Acquire).wrapping_add(pos % N);
            let dif = seq.wrapping_sub(pos.wrapping_add(1)) as isize;
            if dif == 0 {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: published by its producer, and ours since the CAS.
                        let item = unsafe { *cell.item.get() };
                        cell.seq
                            .store(pos.wrapping_add(N).wrapping_sub(pos % N), Ordering::Release);
                        return Some(item);
                    }
                    Err(p) => pos = p,
                }
            } else if dif < 0 {
                return None;
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::SeqCst) == self.tail.load(Ordering::SeqCst)
    }

    /// In a forked child only (one thread): back to empty.
    pub fn reset(&self) {
        for c in &self.cells {
            c.seq.store(0, Ordering::Relaxed);
        }
        self.head.store(0, Ordering::Relaxed);
        self.tail.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Empty for i32 {
        const EMPTY: i32 = -1;
    }

    #[test]
    fn queue_is_fifo_bounded_and_reusable() {
        let q: Queue<i32, 64> = Queue::new();
        for lap in 0..3 {
            for i in 0..64 {
                assert!(q.push(i), "lap {lap} push {i}");
            }
            assert!(!q.push(0), "full");
            for i in 0..64 {
                assert_eq!(q.pop(), Some(i));
            }
            assert!(q.pop().is_none());
        }
    }
}
