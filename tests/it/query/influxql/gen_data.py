#!/usr/bin/env python3
"""Writes data.lp, the data the InfluxQL oracle test writes to both bucketd and InfluxDB.

Run once and commit the output (`python3 gen_data.py > data.lp`); the test reads the file, not
this script. Deterministic: a seeded generator, so running it again gives the same bytes.

Two days from 2024-03-01T00:00:00Z, millisecond timestamps (write with precision=ms):

- cpu,host=a|b|c,region=eu|us  usage, system (floats), every ~10 min with jitter; no cpu point
  at all in 2024-03-01T05:00/06:00; host c starts mid-range at ~2024-03-01T09:27, host b stops
  at ~2024-03-02T20:00.
- temp,site=lab|roof  value (float, negative on the roof at night), every ~7 min; the lab has no
  data 2024-03-02T02:00..04:00, and some whole values (written `21` and `21.0`, floats both).
- counter,dev=x|y  i, n (integers), every 15 min, irregular milliseconds.
- status,dev=x|y  state (string), ok (boolean), code (integer), every ~30 min.
"""
import math
import random

START = 1709251200000  # 2024-03-01T00:00:00Z
HOUR = 3_600_000
END = START + 48 * HOUR

rng = random.Random(20240301)
lines = []


def fmt(v):
    return repr(round(v, 3))


# cpu
regions = {"a": "eu", "b": "eu", "c": "us"}
for host, region in regions.items():
    t = START + rng.randrange(0, 60_000)
    if host == "c":
        t = START + 9 * HOUR + 27 * 60_000 + 13_512
    while t < END:
        hour = (t - START) // HOUR
        if host == "b" and t >= START + 44 * HOUR:
            break
        if hour != 5:
            base = {"a": 30.0, "b": 55.0, "c": 70.0}[host]
            usage = base + 20 * math.sin(t / HOUR / 3.0) + rng.uniform(-5, 5)
            system = rng.uniform(0, 10)
            lines.append((t, f"cpu,host={host},region={region} usage={fmt(usage)},system={fmt(system)} {t}"))
        t += 600_000 + rng.randrange(-90_000, 90_000)

# temp
for site in ("lab", "roof"):
    t = START + rng.randrange(0, 120_000)
    while t < END:
        hour = (t - START) // HOUR
        if not (site == "lab" and 26 <= hour < 28):
            h = (hour % 24) + ((t - START) % HOUR) / HOUR
            if site == "lab":
                value = 21.0 + rng.uniform(-0.5, 0.5)
            else:
                value = 4.0 + 8 * math.sin((h - 9) / 24 * 2 * math.pi) + rng.uniform(-1, 1)
            text = fmt(value)
            # Whole floats, written both ways: InfluxDB answers them without a fraction.
            if site == "lab" and len(lines) % 40 == 0:
                text = str(round(value))
            elif site == "lab" and len(lines) % 40 == 20:
                text = f"{round(value)}.0"
            lines.append((t, f"temp,site={site} value={text} {t}"))
        t += 420_000 + rng.randrange(-30_000, 30_000)

# counter: integer fields
for dev in ("x", "y"):
    t = START
    k = 0
    while t < END:
        ts = t + rng.randrange(0, 1000)
        i = rng.randrange(-20, 100)
        n = k * (3 if dev == "x" else 7)
        lines.append((ts, f"counter,dev={dev} i={i}i,n={n}i {ts}"))
        t += 900_000
        k += 1

# status: string, boolean and integer fields
states = ["ok", "warn", "crit", "ok", "ok"]
for dev in ("x", "y"):
    t = START + (0 if dev == "x" else 600_000)
    while t < END:
        ts = t + rng.randrange(0, 60_000)
        state = rng.choice(states)
        ok = "true" if state == "ok" else "false"
        code = states.index(state)
        lines.append((ts, f'status,dev={dev} state="{state}",ok={ok},code={code}i {ts}'))
        t += 1_800_000

lines.sort()
for _, line in lines:
    print(line)
