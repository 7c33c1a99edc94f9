//! The orders InfluxDB 1.6 leaves to Go's standard library, reproduced step for step: which of
//! several equal heap items `container/heap` hands out first, and where `sort.Sort` (Go 1.19's
//! pattern-defeating quicksort, not stable) leaves equal elements. InfluxDB's answers depend on
//! both where values tie: the order of rows at one time, and which of several equally frequent
//! values `mode()` picks.

/// A binary heap operated exactly as Go's `container/heap` operates on a slice: `less(a, b)`
/// says `a` comes out before `b`.
pub struct GoHeap<T> {
    pub items: Vec<T>,
}

impl<T> GoHeap<T> {
    /// `heap.Init`.
    pub fn init(items: Vec<T>, less: &impl Fn(&T, &T) -> bool) -> Self {
        let mut h = GoHeap { items };
        let n = h.items.len();
        for i in (0..n / 2).rev() {
            h.down(i, n, less);
        }
        h
    }

    /// `heap.Pop`.
    pub fn pop(&mut self, less: &impl Fn(&T, &T) -> bool) -> Option<T> {
        let n = self.items.len().checked_sub(1)?;
        self.items.swap(0, n);
        self.down(0, n, less);
        self.items.pop()
    }

    /// `heap.Push`.
    pub fn push(&mut self, item: T, less: &impl Fn(&T, &T) -> bool) {
        self.items.push(item);
        let mut j = self.items.len() - 1;
        while j > 0 {
            let i = (j - 1) / 2;
            if !less(&self.items[j], &self.items[i]) {
                break;
            }
            self.items.swap(i, j);
            j = i;
        }
    }

    fn down(&mut self, i0: usize, n: usize, less: &impl Fn(&T, &T) -> bool) {
        let mut i = i0;
        loop {
            let j1 = 2 * i + 1;
            if j1 >= n {
                break;
            }
            let mut j = j1;
            if j1 + 1 < n && less(&self.items[j1 + 1], &self.items[j1]) {
                j = j1 + 1;
            }
            if !less(&self.items[j], &self.items[i]) {
                break;
            }
            self.items.swap(i, j);
            i = j;
        }
    }
}

/// InfluxDB's sorted merge of a group's series (each in time order, the series in key order):
/// a [`GoHeap`] of the series ordered by `order` on their next element, which hands out one
/// element at a time. With `descending` the series are taken from the last, each from its end,
/// and the heap puts the greatest first. The elements come out in the order the merge gives
/// them, so equal ones stand where InfluxDB's stand.
pub fn sorted_merge<T>(
    mut series: Vec<Vec<T>>,
    descending: bool,
    order: impl Fn(&T, &T) -> std::cmp::Ordering,
) -> Vec<T> {
    if descending {
        series.reverse();
    }
    let items: Vec<(T, std::vec::IntoIter<T>)> = series
        .into_iter()
        .filter_map(|mut elements| {
            if descending {
                elements.reverse();
            }
            let mut rest = elements.into_iter();
            Some((rest.next()?, rest))
        })
        .collect();
    let less = |x: &(T, std::vec::IntoIter<T>), y: &(T, std::vec::IntoIter<T>)| {
        let o = order(&x.0, &y.0);
        if descending { o.is_gt() } else { o.is_lt() }
    };
    let mut heap = GoHeap::init(items, &less);
    let mut out = Vec::new();
    while let Some((head, mut rest)) = heap.pop(&less) {
        out.push(head);
        if let Some(next) = rest.next() {
            heap.push((next, rest), &less);
        }
    }
    out
}

/// `sort.Sort` as Go 1.19 implements it (`pdqsort` in `zsortinterface.go`), with `less` as the
/// `Less` method. Elements `less` calls equal end where Go leaves them.
pub fn sort<T>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    let n = v.len();
    if n <= 1 {
        return;
    }
    let limit = bits_len(n);
    pdqsort(v, 0, n, limit, less);
}

/// Go's `bits.Len`: the bits needed to write `n`.
fn bits_len(n: usize) -> u32 {
    usize::BITS - n.leading_zeros()
}

#[derive(Clone, Copy, PartialEq)]
enum Hint {
    Unknown,
    Increasing,
    Decreasing,
}

fn pdqsort<T>(
    v: &mut [T],
    mut a: usize,
    mut b: usize,
    mut limit: u32,
    less: &impl Fn(&T, &T) -> bool,
) {
    const MAX_INSERTION: usize = 12;
    let lt = |v: &[T], i: usize, j: usize| less(&v[i], &v[j]);
    let (mut was_balanced, mut was_partitioned) = (true, true);
    loop {
        let length = b - a;
        if length <= MAX_INSERTION {
            insertion_sort(v, a, b, less);
            return;
        }
        if limit == 0 {
            heap_sort(v, a, b, less);
            return;
        }
        if !was_balanced {
            break_patterns(v, a, b);
            limit -= 1;
        }
        let (mut pivot, mut hint) = choose_pivot(v, a, b, less);
        if hint == Hint::Decreasing {
            v[a..b].reverse();
            pivot = (b - 1) - (pivot - a);
            hint = Hint::Increasing;
        }
        if was_balanced
            && was_partitioned
            && hint == Hint::Increasing
            && partial_insertion_sort(v, a, b, less)
        {
            return;
        }
        if a > 0 && !lt(v, a - 1, pivot) {
            a = partition_equal(v, a, b, pivot, less);
            continue;
        }
        let (mid, already) = partition(v, a, b, pivot, less);
        was_partitioned = already;
        let (left, right) = (mid - a, b - mid);
        let threshold = length / 8;
        if left < right {
            was_balanced = left >= threshold;
            pdqsort(v, a, mid, limit, less);
            a = mid + 1;
        } else {
            was_balanced = right >= threshold;
            pdqsort(v, mid + 1, b, limit, less);
            b = mid;
        }
    }
}

fn insertion_sort<T>(v: &mut [T], a: usize, b: usize, less: &impl Fn(&T, &T) -> bool) {
    for i in a + 1..b {
        let mut j = i;
        while j > a && less(&v[j], &v[j - 1]) {
            v.swap(j, j - 1);
            j -= 1;
        }
    }
}

fn sift_down<T>(v: &mut [T], lo: usize, hi: usize, first: usize, less: &impl Fn(&T, &T) -> bool) {
    let mut root = lo;
    loop {
        let mut child = 2 * root + 1;
        if child >= hi {
            return;
        }
        if child + 1 < hi && less(&v[first + child], &v[first + child + 1]) {
            child += 1;
        }
        if !less(&v[first + root], &v[first + child]) {
            return;
        }
        v.swap(first + root, first + child);
        root = child;
    }
}

fn heap_sort<T>(v: &mut [T], a: usize, b: usize, less: &impl Fn(&T, &T) -> bool) {
    let hi = b - a;
    for i in (0..=(hi - 1) / 2).rev() {
        sift_down(v, i, hi, a, less);
    }
    for i in (0..hi).rev() {
        v.swap(a, a + i);
        sift_down(v, 0, i, a, less);
    }
}

fn partition<T>(
    v: &mut [T],
    a: usize,
    b: usize,
    pivot: usize,
    less: &impl Fn(&T, &T) -> bool,
) -> (usize, bool) {
    v.swap(a, pivot);
    // `i` and `j` are signed in Go: `j` can pass below `a + 1`.
    let (mut i, mut j) = (a as isize + 1, b as isize - 1);
    let lt = |v: &[T], x: isize, y: usize| less(&v[x as usize], &v[y]);
    while i <= j && lt(v, i, a) {
        i += 1;
    }
    while i <= j && !lt(v, j, a) {
        j -= 1;
    }
    if i > j {
        v.swap(j as usize, a);
        return (j as usize, true);
    }
    v.swap(i as usize, j as usize);
    i += 1;
    j -= 1;
    loop {
        while i <= j && lt(v, i, a) {
            i += 1;
        }
        while i <= j && !lt(v, j, a) {
            j -= 1;
        }
        if i > j {
            break;
        }
        v.swap(i as usize, j as usize);
        i += 1;
        j -= 1;
    }
    v.swap(j as usize, a);
    (j as usize, false)
}

fn partition_equal<T>(
    v: &mut [T],
    a: usize,
    b: usize,
    pivot: usize,
    less: &impl Fn(&T, &T) -> bool,
) -> usize {
    v.swap(a, pivot);
    let (mut i, mut j) = (a as isize + 1, b as isize - 1);
    loop {
        while i <= j && !less(&v[a], &v[i as usize]) {
            i += 1;
        }
        while i <= j && less(&v[a], &v[j as usize]) {
            j -= 1;
        }
        if i > j {
            break;
        }
        v.swap(i as usize, j as usize);
        i += 1;
        j -= 1;
    }
    i as usize
}

fn partial_insertion_sort<T>(
    v: &mut [T],
    a: usize,
    b: usize,
    less: &impl Fn(&T, &T) -> bool,
) -> bool {
    const MAX_STEPS: usize = 5;
    const SHORTEST_SHIFTING: usize = 50;
    let mut i = a + 1;
    for _ in 0..MAX_STEPS {
        while i < b && !less(&v[i], &v[i - 1]) {
            i += 1;
        }
        if i == b {
            return true;
        }
        if b - a < SHORTEST_SHIFTING {
            return false;
        }
        v.swap(i, i - 1);
        // Go shifts down to index 1 of the whole slice, not to `a`.
        if i - a >= 2 {
            let mut j = i - 1;
            while j >= 1 {
                if !less(&v[j], &v[j - 1]) {
                    break;
                }
                v.swap(j, j - 1);
                j -= 1;
            }
        }
        if b - i >= 2 {
            for j in i + 1..b {
                if !less(&v[j], &v[j - 1]) {
                    break;
                }
                v.swap(j, j - 1);
            }
        }
    }
    false
}

fn break_patterns<T>(v: &mut [T], a: usize, b: usize) {
    let length = b - a;
    if length < 8 {
        return;
    }
    let mut random = length as u64;
    let modulus = 1usize << bits_len(length);
    for idx in a + (length / 4) * 2 - 1..=a + (length / 4) * 2 + 1 {
        // Go 1.19's xorshift (13, 17, 5).
        random ^= random << 13;
        random ^= random >> 17;
        random ^= random << 5;
        let mut other = (random as usize) & (modulus - 1);
        if other >= length {
            other -= length;
        }
        v.swap(idx, a + other);
    }
}

fn choose_pivot<T>(v: &[T], a: usize, b: usize, less: &impl Fn(&T, &T) -> bool) -> (usize, Hint) {
    const SHORTEST_NINTHER: usize = 50;
    const MAX_SWAPS: usize = 4 * 3;
    let l = b - a;
    let mut swaps = 0usize;
    let (mut i, mut j, mut k) = (a + l / 4, a + l / 4 * 2, a + l / 4 * 3);
    if l >= 8 {
        if l >= SHORTEST_NINTHER {
            i = median(v, i - 1, i, i + 1, &mut swaps, less);
            j = median(v, j - 1, j, j + 1, &mut swaps, less);
            k = median(v, k - 1, k, k + 1, &mut swaps, less);
        }
        j = median(v, i, j, k, &mut swaps, less);
    }
    match swaps {
        0 => (j, Hint::Increasing),
        MAX_SWAPS => (j, Hint::Decreasing),
        _ => (j, Hint::Unknown),
    }
}

fn median<T>(
    v: &[T],
    a: usize,
    b: usize,
    c: usize,
    swaps: &mut usize,
    less: &impl Fn(&T, &T) -> bool,
) -> usize {
    let mut order2 = |x: usize, y: usize| {
        if less(&v[y], &v[x]) {
            *swaps += 1;
            (y, x)
        } else {
            (x, y)
        }
    };
    let (a, b) = order2(a, b);
    let (b, c) = order2(b, c);
    let _ = c;
    let (_, b) = order2(a, b);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_orders_by_less_at_every_length() {
        // A small generator: lengths across insertion sort, median of three, the ninther and
        // pattern breaking, with many equal keys.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..400usize {
            let mut v: Vec<(u64, usize)> = (0..n)
                .map(|i| {
                    x ^= x << 7;
                    x ^= x >> 9;
                    (x % (1 + n as u64 / 5), i)
                })
                .collect();
            let mut expected: Vec<u64> = v.iter().map(|p| p.0).collect();
            expected.sort_unstable();
            sort(&mut v, &|a, b| a.0 < b.0);
            assert_eq!(v.iter().map(|p| p.0).collect::<Vec<_>>(), expected, "length {n}");
            let mut seen: Vec<usize> = v.iter().map(|p| p.1).collect();
            seen.sort_unstable();
            assert!(seen.iter().enumerate().all(|(i, s)| i == *s), "length {n} lost an element");
        }
        // Descending and saw-tooth inputs take the reversal and heapsort paths.
        for n in [13usize, 50, 64, 257] {
            let mut v: Vec<usize> = (0..n).rev().collect();
            sort(&mut v, &|a, b| a < b);
            assert!(v.windows(2).all(|w| w[0] <= w[1]));
            let mut v: Vec<usize> = (0..n).map(|i| i % 7).collect();
            sort(&mut v, &|a, b| a < b);
            assert!(v.windows(2).all(|w| w[0] <= w[1]));
        }
    }

    #[test]
    fn sort_leaves_equal_elements_where_go_does() {
        // Insertion sort (length ≤ 12) is stable.
        let mut v = vec![(1, 'a'), (0, 'b'), (1, 'c'), (0, 'd')];
        sort(&mut v, &|a, b| a.0 < b.0);
        assert_eq!(v, vec![(0, 'b'), (0, 'd'), (1, 'a'), (1, 'c')]);
        // Past 12 elements the partitions move equal ones. Each expected order is what Go
        // 1.19.8's `sort.Sort` left, by original index, for these values.
        let cases: [(&[u8], &[usize]); 2] = [
            (
                &[0, 0, 1, 2, 2, 0, 2, 0, 1, 2, 2, 2, 2, 1],
                &[7, 1, 5, 0, 2, 13, 8, 6, 4, 9, 10, 11, 12, 3],
            ),
            (
                &[
                    1, 2, 2, 2, 2, 2, 4, 2, 3, 3, 2, 0, 1, 0, 3, 4, 1, 0, 1, 1, 2, 2, 4, 2, 3, 3,
                    2, 1, 1, 4, 2, 0, 2, 1, 2, 1, 4, 0, 4, 3, 2, 3, 3, 1, 2, 2, 1, 0, 0, 0, 2, 0,
                    0, 1, 2, 0, 4, 0, 3, 0,
                ],
                &[
                    51, 59, 57, 55, 31, 52, 13, 49, 48, 47, 37, 11, 17, 12, 0, 43, 16, 27, 18, 19,
                    46, 35, 33, 53, 28, 44, 50, 1, 2, 3, 30, 23, 32, 54, 34, 21, 4, 20, 5, 26, 40,
                    7, 10, 45, 24, 25, 42, 9, 8, 41, 39, 58, 14, 38, 22, 29, 56, 36, 6, 15,
                ],
            ),
        ];
        for (values, expected) in cases {
            let mut v: Vec<(u8, usize)> = values.iter().copied().zip(0..).collect();
            sort(&mut v, &|a, b| a.0 < b.0);
            assert_eq!(v.iter().map(|p| p.1).collect::<Vec<_>>(), expected);
        }
    }

    #[test]
    fn heap_hands_out_equal_items_as_go_does() {
        // All equal: Go pops index 0, then the last, then down the rest.
        let never = |_: &usize, _: &usize| false;
        let mut h = GoHeap::init(vec![0, 1, 2, 3], &never);
        let order: Vec<usize> = std::iter::from_fn(|| h.pop(&never)).collect();
        assert_eq!(order, vec![0, 3, 2, 1]);
        let lt = |a: &usize, b: &usize| a < b;
        let mut h = GoHeap::init(vec![5, 3, 8, 1], &lt);
        h.push(0, &lt);
        let order: Vec<usize> = std::iter::from_fn(|| h.pop(&lt)).collect();
        assert_eq!(order, vec![0, 1, 3, 5, 8]);
    }
}
