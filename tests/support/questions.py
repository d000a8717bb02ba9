"""Questions a user might type about the cameras, generated: every form `/v1/ask`
parses, windows with one end or both, relative windows, names that exist and names
that do not, and odd text. The sweeps feed them to the parser and to a server, which
must answer or refuse each one, never fail."""

from __future__ import annotations

import random

SUBJECTS = ["people", "persons", "pedestrians", "cars", "vehicles", "bikes", "cyclists", "trucks", "dogs", "anyone"]
WINDOWS = ["", " between {a} and {b}", " after {a}", " since {a}", " before {b}", " until {b}", " in between {a} and {b}",
           " in the last {n} minutes", " during the last {n} minutes", " in the past hour", " over the last minute",
           " in the last {big} seconds", " in the first {n} seconds", " in the first ten seconds",
           " at {a}", " at the {n} minute mark", " yesterday between 9 and 10", " this morning", " today",
           " between {b} and {a}", " after 99:99", " before 0:00", " in the last 0 minutes"]
FORMS = ["how many {s} crossed {line}{w}?", "how many {s} crossed {line} {way}{w}?", "count the {s} crossing {line}{w}.",
         "did any {s} cross {line}{w}?", "when did the first {one} appear{w}?", "when was the last {one} seen{w}?",
         "when did the last {one} cross {line}{w}?", "was there a {one} in {zone}{w}?",
         "how many {s} were in {zone}{w}?", "how long did {s} stay in {zone}{w}?", "how long did the {s} wait{w}?",
         "how many different {s} were seen{w}?", "what is the weather{w}?", "{s}{w}", "{line} {zone}{w}",
         "how many {s} crossed {line} in{w}", "which camera saw more {s}{w}?"]
ODD = ["", "?", "   ", "🙂🙂🙂", "how many people crossed ' OR 1=1 --", "crossed crossed crossed", "\x00\x01",
       "how many people crossed walkway" * 40, "%s%s%n", "{}", "NaN", "1e309", "-0:05", "0:05 0:06 0:07"]


def questions(num: int, lines: list[str], zones: list[str], seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    places_lines = lines + ["bridge", "lane-9", "walk way"]
    places_zones = zones + ["parking", "north sidewalk", "lobby"]
    out = []
    for i in range(num):
        if i % 10 == 9:
            out.append(rng.choice(ODD) + rng.choice(["", " " + rng.choice(FORMS)]))
            continue
        a, b = rng.randint(0, 300), rng.randint(0, 300)
        window = rng.choice(WINDOWS).format(a=f"{a // 60}:{a % 60:02d}", b=f"{b // 60}:{b % 60:02d}",
                                            n=rng.choice([1, 2, 5, 30]), big=rng.choice([10, 999999]))
        subject = rng.choice(SUBJECTS)
        text = rng.choice(FORMS).format(s=subject, one=subject.rstrip("s"), line=rng.choice(places_lines),
                                        zone=rng.choice(places_zones), way=rng.choice(["in", "out", "inbound"]),
                                        w=window)
        out.append(text.upper() if rng.random() < 0.05 else text)
    return out
