//! Request bodies: reading numbers to line protocol or JSON, written straight into a byte
//! buffer (formatting must stay far cheaper than the server's parsing, or the generator would
//! measure itself).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    LineProtocol,
    Json,
}

/// Where reading `n` goes and what it says. See the crate doc for the numbering.
pub struct Layout {
    /// Series key per sensor: `<measurement>,sensor=<prefix><i>`, zero-padded.
    keys: Vec<String>,
    start_ms: i64,
    step_ms: i64,
}

impl Layout {
    pub fn new(measurement: &str, prefix: &str, sensors: u64, start_ms: i64, step_ms: i64) -> Self {
        let width = (sensors.saturating_sub(1)).to_string().len();
        let keys =
            (0..sensors).map(|i| format!("{measurement},sensor={prefix}{i:0width$}")).collect();
        Layout { keys, start_ms, step_ms }
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

    /// Appends the body of readings `[n0, n1)`.
    pub fn write_body(&self, proto: Protocol, (n0, n1): (u64, u64), out: &mut Vec<u8>) {
        out.reserve(((n1 - n0) as usize) * 96);
        if proto == Protocol::Json {
            out.push(b'[');
        }
        for n in n0..n1 {
            let (s, k) = self.locate(n);
            let key = self.keys[s as usize].as_bytes();
            let ts = self.ts_ms(k);
            // Centi-degrees and per-mille humidity: a slow, bounded wave per sensor.
            let temp = 1500 + (s * 7 + k) % 1500;
            let hum = 300 + (s + 3 * k) % 600;
            match proto {
                Protocol::LineProtocol => {
                    out.extend_from_slice(key);
                    out.extend_from_slice(b" temperature=");
                    push_fixed(out, temp, 2);
                    out.extend_from_slice(b",humidity=");
                    push_fixed(out, hum, 1);
                    out.push(b' ');
                    push_u64(out, ts as u64);
                    out.extend_from_slice(b"000000\n");
                }
                Protocol::Json => {
                    if n > n0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(b"{\"sensor\":\"");
                    out.extend_from_slice(key);
                    out.extend_from_slice(b"\",\"ts\":");
                    push_u64(out, ts as u64);
                    out.extend_from_slice(b",\"fields\":{\"temperature\":");
                    push_fixed(out, temp, 2);
                    out.extend_from_slice(b",\"humidity\":");
                    push_fixed(out, hum, 1);
                    out.extend_from_slice(b"}}");
                }
            }
        }
        if proto == Protocol::Json {
            out.push(b']');
        }
    }
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

    #[test]
    fn fixed_point() {
        let mut out = Vec::new();
        push_fixed(&mut out, 1507, 2);
        out.push(b' ');
        push_fixed(&mut out, 300, 1);
        assert_eq!(out, b"15.07 30.0");
    }
}
