"""A decoder of `rally-wire` snapshots written from docs/wire.md alone (section numbers are that
page's): full snapshots (5), column deltas (6) and record deltas (Appendix A), with the default
configuration (2). Snapshots are the JSON code form of the test vectors (9)."""

P = (19, 18, 19)  # position bits per axis
S = (512000, 256000, 512000)  # position steps per axis
R, M = 12, 4094  # rotation bits per component, largest code
V, H = 14, 6400  # velocity bits per component, half range


class Refused(Exception):
    """A datagram the page says a decoder refuses."""


class Bits:
    """Section 1: least significant bit first."""

    def __init__(self, data):
        self.value, self.size, self.pos = int.from_bytes(data, "little"), len(data) * 8, 0

    def u(self, n):
        if self.pos + n > self.size:
            raise Refused(f"truncated at bit {self.pos}")
        out = (self.value >> self.pos) & ((1 << n) - 1)
        self.pos += n
        return out

    def align(self):
        if self.u(-self.pos % 8):
            raise Refused("non-zero padding")

    def end(self):
        self.align()
        if self.pos != self.size:
            raise Refused("trailing bytes")

    def gap(self):
        """Section 4's tiered id gap."""
        if not self.u(1):
            return 0
        if not self.u(1):
            return self.u(3)
        return self.u(8) if not self.u(1) else self.u(32)

    def pos3(self):
        codes = [self.u(n) for n in P]
        if any(c > s for c, s in zip(codes, S)):
            raise Refused(f"position {codes}")
        return codes

    def rot(self):
        largest = self.u(2)
        return {"largest": largest, "components": [min(self.u(R), M) for _ in range(3)]}

    def vel3(self):
        codes = [self.u(V) - H for _ in range(3)]
        if any(abs(c) > H for c in codes):
            raise Refused(f"velocity {codes}")
        return codes

    def vel(self):
        return self.vel3() if self.u(1) else [0, 0, 0]

    def body(self, entity_id):
        flags = self.u(2)
        entity = {"id": entity_id, "position": self.pos3(), "rotation": self.rot()}
        entity["linear_velocity"] = self.vel3() if flags & 1 else [0, 0, 0]
        entity["angular_velocity"] = self.vel3() if flags & 2 else [0, 0, 0]
        return entity


class Ids:
    """Ascending ids from gaps: the first gap is the id, each later one `id - previous - 1`."""

    def __init__(self):
        self.previous = None

    def next(self, bits):
        gap = bits.gap()
        self.previous = gap if self.previous is None else self.previous + 1 + gap
        if self.previous > 0xFFFFFFFF:
            raise Refused("id")
        return self.previous


def decode(data, baseline=None):
    if not data:
        raise Refused("empty")
    kind = {1: full, 2: records, 3: columns}.get(data[0])
    if kind is None:
        raise Refused(f"format {data[0]}")
    return kind(Bits(data), baseline)


def full(bits, _baseline):
    bits.u(8)
    tick, n = bits.u(32), bits.u(16)
    flags = [bits.u(2) for _ in range(n)]
    positions = [bits.pos3() for _ in range(n)]
    rotations = [bits.rot() for _ in range(n)]
    ids = Ids()
    entities = [{"id": ids.next(bits), "position": positions[i], "rotation": rotations[i]}
                for i in range(n)]
    for key, bit in (("linear_velocity", 1), ("angular_velocity", 2)):
        for i in range(n):
            entities[i][key] = bits.vel3() if flags[i] & bit else [0, 0, 0]
    bits.end()
    return {"tick": tick, "entities": entities}


def zigzag(z):
    return (z >> 1) ^ -(z & 1)


def copy(entity):
    return {"id": entity["id"], "position": list(entity["position"]),
            "rotation": {"largest": entity["rotation"]["largest"],
                         "components": list(entity["rotation"]["components"])},
            "linear_velocity": list(entity["linear_velocity"]),
            "angular_velocity": list(entity["angular_velocity"])}


FIELDS = ("position", "rotation", "linear_velocity", "angular_velocity")


def components(entity, field):
    return entity["rotation"]["components"] if field == "rotation" else entity[field]


def check_ranges(entity):
    for i in range(3):
        if not 0 <= entity["position"][i] <= S[i]:
            raise Refused("position out of range")
        if not 0 <= entity["rotation"]["components"][i] <= (1 << R) - 1:
            raise Refused("rotation out of range")
        if abs(entity["linear_velocity"][i]) > H or abs(entity["angular_velocity"][i]) > H:
            raise Refused("velocity out of range")


def absolute(bits, entity, field):
    if field == "position":
        entity["position"] = bits.pos3()
    elif field == "rotation":
        entity["rotation"] = bits.rot()
    else:
        entity[field] = bits.vel()


def check_baseline(baseline, tick):
    if baseline is None or baseline["tick"] != tick:
        raise Refused("baseline mismatch")
    return {e["id"]: copy(e) for e in baseline["entities"]}


def records(bits, baseline):
    bits.u(8)
    tick, base_tick, count = bits.u(32), bits.u(32), bits.u(16)
    held, ids = check_baseline(baseline, base_tick), Ids()
    for _ in range(count):
        entity_id = ids.next(bits)
        if not bits.u(1):  # update
            if entity_id not in held:
                raise Refused("update of an absent id")
            widths = bits.u(16)
            if not widths:
                raise Refused("all widths zero")
            for k, field in enumerate(FIELDS):
                w = widths >> (4 * k) & 15
                if w == 15:
                    absolute(bits, held[entity_id], field)
                elif w:
                    codes = components(held[entity_id], field)
                    for i in range(3):
                        codes[i] += zigzag(bits.u(w))
            check_ranges(held[entity_id])
        elif not bits.u(1):  # spawn
            if entity_id in held:
                raise Refused("spawn of a present id")
            held[entity_id] = bits.body(entity_id)
        elif held.pop(entity_id, None) is None:
            raise Refused("despawn of an absent id")
    bits.end()
    return {"tick": tick, "entities": [held[i] for i in sorted(held)]}


def columns(bits, baseline):
    bits.u(8)
    tick, base_tick = bits.u(32), bits.u(32)
    updates, exceptions, edits = bits.u(16), bits.u(32), bits.u(16)
    first, gap_width = bits.u(16), bits.u(8)
    widths = [bits.u(4) for _ in range(12)]
    if gap_width > 15 or max(widths) > 14:
        raise Refused("widths")
    held, ids = check_baseline(baseline, base_tick), Ids()
    for _ in range(edits):
        entity_id = ids.next(bits)
        if bits.u(1):
            if entity_id in held:
                raise Refused("spawn of a present id")
            held[entity_id] = bits.body(entity_id)
        elif held.pop(entity_id, None) is None:
            raise Refused("despawn of an absent id")
    bits.align()
    result = [held[i] for i in sorted(held)]
    indices, index = [], first - 1
    for _ in range(updates):
        index += 1 + bits.u(gap_width)
        indices.append(index)
    bits.align()
    if indices and indices[-1] >= len(result):
        raise Refused("update index")
    for column, w in enumerate(widths):
        field, i = FIELDS[column // 3], column % 3
        for k in range(updates):
            components(result[indices[k]], field)[i] += zigzag(bits.u(w))
        bits.align()
    for entity in (result[k] for k in indices):
        check_ranges(entity)
    update = -1
    for n in range(exceptions):
        gap = bits.gap()
        update = gap if n == 0 else update + gap
        if update >= updates:
            raise Refused("exception index")
        absolute(bits, result[indices[update]], FIELDS[bits.u(2)])
    bits.end()
    return {"tick": tick, "entities": result}
