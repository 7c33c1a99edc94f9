//! Request bodies: reading numbers to line protocol or JSON, written straight into a byte
//! buffer (formatting must stay far cheaper than the server's parsing, or the generator would
//! measure itself).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    LineProtocol,
    Json,
}

/// Temperature in centi-degrees is `TEMP_MIN + (7s + k + j) % TEMP_SPAN`, humidity per mille
/// `HUM_MIN + (s + 3k + j) % HUM_SPAN`: a slow, bounded wave per sensor, where `j` is 0 or,
/// with [`Extra::jitter`], a pseudo-random `0..=jitter` drawn per reading. Every value so has
/// the same number of characters ("15.00".."29.99", "30.0".."89.9"), and the texts are made
/// once.
const TEMP_MIN: u64 = 1500;
const TEMP_SPAN: u64 = 1500;
const HUM_MIN: u64 = 300;
const HUM_SPAN: u64 = 600;

/// Where reading `n` goes and what it says. See the crate doc for the numbering.
pub struct Layout {
    /// Series key per sensor: `<measurement>,sensor=<prefix><i>`, zero-padded.
    keys: Vec<String>,
    /// A line-protocol line up to its first value: `<key> temperature=`.
    line_heads: Vec<Box<[u8]>>,
    temperatures: Vec<[u8; 5]>,
    humidities: Vec<[u8; 4]>,
    start_ms: i64,
    step_ms: i64,
    jitter: u64,
    /// What every reading carries after its two fields, per format: `TAILS` variants that
    /// differ in the string's first byte (empty when the reading has nothing extra).
    lp_tails: Vec<Box<[u8]>>,
    json_tails: Vec<Box<[u8]>>,
}

/// Fields a reading carries beside temperature and humidity, to give readings the size and
/// width the memory budget must hold (`--extra-fields`, `--string-bytes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extra {
    /// Float fields `f0`, `f1`, ..., each with a fixed value: the server stores every
    /// reading's values whatever they are.
    pub fields: u32,
    /// Length of a string field `note`, 0 for none.
    pub string_bytes: u32,
    /// The most steps the two fields' values jump by, at random, from one reading to the
    /// next (0: they move by one fixed step, which a store can take in runs).
    pub jitter: u32,
}

/// How many versions of a tail there are: reading `(s, k)` takes `(s + k) % TAILS`, so
/// consecutive readings of one sensor never carry the same string.
const TAILS: u64 = 16;

impl Extra {
    /// The tail in line protocol (`lp`) or as JSON object members, variant `v`.
    fn tail(&self, lp: bool, v: u64) -> Box<[u8]> {
        let mut out = String::new();
        for i in 0..self.fields {
            let v = 1.5 + f64::from(i);
            out += &if lp { format!(",f{i}={v}") } else { format!(",\"f{i}\":{v}") };
        }
        if self.string_bytes > 0 {
            let first = char::from(b'a' + v as u8);
            let text = format!("{first}{}", "x".repeat(self.string_bytes as usize - 1));
            out += &if lp { format!(",note=\"{text}\"") } else { format!(",\"note\":\"{text}\"") };
        }
        out.into_bytes().into()
    }
}

impl Layout {
    #[cfg(test)]
    pub fn new(measurement: &str, prefix: &str, sensors: u64, start_ms: i64, step_ms: i64) -> Self {
        Self::with_extra(measurement, prefix, sensors, start_ms, step_ms, Extra::default())
    }

    pub fn with_extra(
        measurement: &str,
        prefix: &str,
        sensors: u64,
        start_ms: i64,
        step_ms: i64,
        extra: Extra,
    ) -> Self {
        let width = (sensors.saturating_sub(1)).to_string().len();
        let keys: Vec<String> =
            (0..sensors).map(|i| format!("{measurement},sensor={prefix}{i:0width$}")).collect();
        let line_heads =
            keys.iter().map(|k| format!("{k} temperature=").into_bytes().into()).collect();
        Layout {
            keys,
            line_heads,
            temperatures: (TEMP_MIN..TEMP_MIN + TEMP_SPAN).map(|v| fixed_text(v, 2)).collect(),
            humidities: (HUM_MIN..HUM_MIN + HUM_SPAN).map(|v| fixed_text(v, 1)).collect(),
            start_ms,
            step_ms,
            jitter: u64::from(extra.jitter),
            lp_tails: (0..TAILS).map(|v| extra.tail(true, v)).collect(),
            json_tails: (0..TAILS).map(|v| extra.tail(false, v)).collect(),
        }
    }

    pub fn sensors(&self) -> u64 {
        self.keys.len() as u64
    }

    pub fn key(&self, sensor: u64) -> &str {
        &self.keys[sensor as usize]
    }

    pub fn start_ms(&self) -> i64 {
        self.start_ms
    }

    pub fn step_ms(&self) -> i64 {
        self.step_ms
    }

    /// Sensor and per-sensor index of reading `n`.
    pub fn locate(&self, n: u64) -> (u64, u64) {
        (n % self.sensors(), n / self.sensors())
    }

    pub fn ts_ms(&self, k: u64) -> i64 {
        self.start_ms + k as i64 * self.step_ms
    }

    /// Appends the body of readings `[n0, n1)`. Per reading it only copies texts made before
    /// (the timestamp's once per `k`), so that sending stays far cheaper than parsing: on two
    /// shared cores the generator's time is taken from the server's.
    pub fn write_body(&self, proto: Protocol, (n0, n1): (u64, u64), out: &mut Vec<u8>) {
        out.reserve(((n1 - n0) as usize) * (96 + self.lp_tails[0].len()));
        if proto == Protocol::Json {
            out.push(b'[');
        }
        let (mut s, mut k) = self.locate(n0);
        let mut ts_text = Vec::new();
        self.timestamp_text(proto, k, &mut ts_text);
        for n in n0..n1 {
            let j = self.jitter(s, k);
            let temp = &self.temperatures[((s * 7 + k + j) % TEMP_SPAN) as usize];
            let hum = &self.humidities[((s + 3 * k + j) % HUM_SPAN) as usize];
            let tail = ((s + k) % TAILS) as usize;
            match proto {
                Protocol::LineProtocol => {
                    out.extend_from_slice(&self.line_heads[s as usize]);
                    out.extend_from_slice(temp);
                    out.extend_from_slice(b",humidity=");
                    out.extend_from_slice(hum);
                    out.extend_from_slice(&self.lp_tails[tail]);
                    out.extend_from_slice(&ts_text);
                }
                Protocol::Json => {
                    if n > n0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(b"{\"sensor\":\"");
                    out.extend_from_slice(self.keys[s as usize].as_bytes());
                    out.extend_from_slice(b"\",\"ts\":");
                    out.extend_from_slice(&ts_text);
                    out.extend_from_slice(b",\"fields\":{\"temperature\":");
                    out.extend_from_slice(temp);
                    out.extend_from_slice(b",\"humidity\":");
                    out.extend_from_slice(hum);
                    out.extend_from_slice(&self.json_tails[tail]);
                    out.extend_from_slice(b"}}");
                }
            }
            s += 1;
            if s == self.sensors() {
                s = 0;
                k += 1;
                self.timestamp_text(proto, k, &mut ts_text);
            }
        }
        if proto == Protocol::Json {
            out.push(b']');
        }
    }

    /// Reading `(s, k)`'s jump, `0..=jitter`, the same on every run.
    fn jitter(&self, s: u64, k: u64) -> u64 {
        // splitmix64's finalizer: every bit of `(s, k)` moves every bit of the draw.
        let mut h = ((s << 40) ^ k).wrapping_add(0x9e37_79b9_7f4a_7c15);
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (h ^ (h >> 31)) % (self.jitter + 1)
    }

    /// Sets `text` to the `k`th timestamp as a line ends with it (ns), or as JSON has it (ms).
    fn timestamp_text(&self, proto: Protocol, k: u64, text: &mut Vec<u8>) {
        text.clear();
        match proto {
            Protocol::LineProtocol => {
                text.push(b' ');
                push_u64(text, self.ts_ms(k) as u64);
                text.extend_from_slice(b"000000\n");
            }
            Protocol::Json => push_u64(text, self.ts_ms(k) as u64),
        }
    }
}

/// `v / 10^decimals` as exactly `N` characters.
fn fixed_text<const N: usize>(v: u64, decimals: u32) -> [u8; N] {
    let mut text = Vec::with_capacity(N);
    push_fixed(&mut text, v, decimals);
    text.try_into().unwrap_or_else(|t: Vec<u8>| panic!("{t:?} is not {N} characters"))
}

fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// `v / 10^decimals` with exactly `decimals` digits after the point.
fn push_fixed(out: &mut Vec<u8>, v: u64, decimals: u32) {
    let scale = 10u64.pow(decimals);
    push_u64(out, v / scale);
    out.push(b'.');
    let frac = v % scale;
    let mut div = scale / 10;
    while div > 0 {
        out.push(b'0' + ((frac / div) % 10) as u8);
        div /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_protocol_body() {
        let l = Layout::new("env", "s", 12, 1_700_000_000_000, 1000);
        let mut out = Vec::new();
        l.write_body(Protocol::LineProtocol, (11, 13), &mut out);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // Reading 11 is sensor 11's first, reading 12 is sensor 0's second.
        assert_eq!(lines[0], "env,sensor=s11 temperature=15.77,humidity=31.1 1700000000000000000");
        assert_eq!(lines[1], "env,sensor=s00 temperature=15.01,humidity=30.3 1700000001000000000");
    }

    #[test]
    fn json_body_is_json() {
        let l = Layout::new("env", "s", 3, 1_000, 10);
        let mut out = Vec::new();
        l.write_body(Protocol::Json, (0, 4), &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let items = v.as_array().unwrap();
        assert_eq!(items.len(), 4);
        assert_eq!(items[3]["sensor"], "env,sensor=s0");
        assert_eq!(items[3]["ts"], 1_010);
        assert_eq!(items[0]["fields"]["temperature"], 15.0);
    }

    /// The texts made once give the same bytes as formatting every reading, across sensors
    /// wrapping to the next timestamp, in both formats.
    #[test]
    fn bodies_match_formatting_every_reading() {
        let l = Layout::new("env", "s", 7, 1_700_000_000_000, 1000);
        let (n0, n1) = (5, 3000);
        let mut lp = String::new();
        let mut json = Vec::new();
        for n in n0..n1 {
            let (s, k) = l.locate(n);
            let temp = (1500 + (s * 7 + k) % 1500) as f64 / 100.0;
            let hum = (300 + (s + 3 * k) % 600) as f64 / 10.0;
            let ts = l.ts_ms(k);
            lp += &format!("{} temperature={temp:.2},humidity={hum:.1} {ts}000000\n", l.key(s));
            json.push(format!(
                r#"{{"sensor":"{}","ts":{ts},"fields":{{"temperature":{temp:.2},"humidity":{hum:.1}}}}}"#,
                l.key(s)
            ));
        }
        let mut out = Vec::new();
        l.write_body(Protocol::LineProtocol, (n0, n1), &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), lp);
        let mut out = Vec::new();
        l.write_body(Protocol::Json, (n0, n1), &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), format!("[{}]", json.join(",")));
    }

    /// With a jitter, a value's change from one reading to the next varies within the wave's
    /// step plus `0..=jitter`, and the same readings come out on every run.
    #[test]
    fn jitter_varies_the_changes_within_its_bound() {
        let extra = Extra { jitter: 3, ..Extra::default() };
        let l = Layout::with_extra("env", "s", 1, 1_700_000_000_000, 1000, extra);
        let temps = |l: &Layout| -> Vec<i64> {
            let mut out = Vec::new();
            l.write_body(Protocol::LineProtocol, (0, 400), &mut out);
            let text = String::from_utf8(out).unwrap();
            text.lines()
                .map(|line| {
                    let v = line.split("temperature=").nth(1).unwrap().split(',').next().unwrap();
                    (v.parse::<f64>().unwrap() * 100.0).round() as i64
                })
                .collect()
        };
        let got = temps(&l);
        let changes: std::collections::BTreeSet<i64> =
            got.windows(2).map(|w| w[1] - w[0]).filter(|d| d.abs() < 1000).collect();
        assert!(changes.iter().all(|d| (-2..=4).contains(d)), "{changes:?}");
        assert!(changes.len() >= 5, "{changes:?}");
        assert_eq!(temps(&Layout::with_extra("env", "s", 1, 1_700_000_000_000, 1000, extra)), got);
    }

    /// Extra fields and the string come after humidity, in both formats, and the string's
    /// first byte differs between a sensor's consecutive readings.
    #[test]
    fn extra_fields_and_string() {
        let extra = Extra { fields: 2, string_bytes: 5, jitter: 0 };
        let l = Layout::with_extra("env", "s", 2, 1_700_000_000_000, 1000, extra);
        let mut out = Vec::new();
        l.write_body(Protocol::LineProtocol, (0, 3), &mut out);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            r#"env,sensor=s0 temperature=15.00,humidity=30.0,f0=1.5,f1=2.5,note="axxxx" 1700000000000000000"#
        );
        assert!(lines[2].contains(r#"note="bxxxx""#), "{}", lines[2]);
        let mut out = Vec::new();
        l.write_body(Protocol::Json, (0, 3), &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v[1]["fields"]["f1"], 2.5);
        assert_eq!(v[1]["fields"]["note"], "bxxxx");
    }

    #[test]
    fn fixed_point() {
        let mut out = Vec::new();
        push_fixed(&mut out, 1507, 2);
        out.push(b' ');
        push_fixed(&mut out, 300, 1);
        assert_eq!(out, b"15.07 30.0");
    }
}
