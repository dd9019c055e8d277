// rally_wire.hpp: a decoder for Rally's snapshot format (docs/wire.md, format version 1), for
// C++ clients (Unreal, native tools). Header only, C++17, no dependencies.
//
// Written from docs/wire.md alone, not from the Rust code, so that it checks the spec: the Rust
// test crates/wire/tests/cpp_port.rs compiles it, decodes every test vector and thousands of
// random and corrupted datagrams with it and with rally-wire, and wants the same answers.
//
// Usage:
//   rally::wire::Config config = rally::wire::Config::defaults();
//   rally::wire::Snapshot baseline, current;
//   rally::wire::Error e = rally::wire::decode(config, bytes, len, &baseline, current);
//   if (e.kind != rally::wire::ErrorKind::None) { /* drop the datagram; e says why */ }
//
// A delta needs the baseline snapshot its header names (peek_header tells which). Decoding
// never throws, never reads out of bounds and never holds more than entities_max entities.

#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rally::wire {

constexpr uint8_t kFormatFull = 0x01;
constexpr uint8_t kFormatDelta = 0x02;
// The column delta (section 6), what servers send; kFormatDelta is the record delta of
// Appendix A, still read.
constexpr uint8_t kFormatDeltaColumns = 0x03;
constexpr uint32_t kWidthAbsolute = 15;

// Both ends' quantizers (docs/wire.md section 2). Only the derived integers matter to the
// decoder of codes; the metric parameters turn codes into SI units.
struct Config {
    std::array<uint32_t, 3> position_steps;  // S per axis
    std::array<uint32_t, 3> position_bits;   // P per axis
    std::array<double, 3> position_min;      // m
    std::array<double, 3> position_max;      // m
    double position_precision;               // m
    uint32_t rotation_bits;                  // R
    uint32_t linear_half, linear_bits;       // H, V
    double linear_precision;                 // m/s
    uint32_t angular_half, angular_bits;     // H, V
    double angular_precision;                // rad/s
    uint32_t entities_max;

    // Section 2's derivation from the metric parameters; both ends must use the same ones.
    static Config make(std::array<double, 3> min, std::array<double, 3> max, double precision,
                       uint32_t rotation_bits, double linear_max, double linear_precision,
                       double angular_max, double angular_precision, uint32_t entities_max) {
        Config c{};
        for (int a = 0; a < 3; ++a) {
            c.position_steps[a] = steps_to_cover(max[a] - min[a], precision);
            c.position_bits[a] = bit_length(c.position_steps[a]);
        }
        c.position_min = min;
        c.position_max = max;
        c.position_precision = precision;
        c.rotation_bits = rotation_bits;
        c.linear_half = steps_to_cover(linear_max, linear_precision);
        c.linear_bits = bit_length(2ull * c.linear_half);
        c.linear_precision = linear_precision;
        c.angular_half = steps_to_cover(angular_max, angular_precision);
        c.angular_bits = bit_length(2ull * c.angular_half);
        c.angular_precision = angular_precision;
        c.entities_max = entities_max;
        return c;
    }

    // The defaults of docs/wire.md section 2, which the test vectors use: S = (512000, 256000,
    // 512000), P = (19, 18, 19), R = 12, H = 6400, V = 14.
    static Config defaults() {
        return make({-256, -64, -256}, {256, 192, 256}, 0.001, 12, 64, 0.01, 64, 0.01, 4096);
    }

    // ceil(span / precision), except that a quotient within one part in a million of an
    // integer is that integer (0.01 is not exact in binary).
    static uint32_t steps_to_cover(double span, double precision) {
        double quotient = span / precision;
        double nearest = std::round(quotient);
        bool integral = std::fabs(quotient - nearest) <= 1e-6 * std::max(nearest, 1.0);
        return uint32_t(integral ? nearest : std::ceil(quotient));
    }

    static uint32_t bit_length(uint64_t x) {
        uint32_t bits = 0;
        while (x >> bits) ++bits;
        return bits;
    }
};

struct Entity {
    uint32_t id = 0;
    std::array<uint32_t, 3> position{};  // codes, 0..=S
    uint8_t largest = 0;                 // index of the largest quaternion component (x=0 .. w=3)
    std::array<uint16_t, 3> rotation{};  // the other three components' codes
    std::array<int32_t, 3> linear_velocity{};   // signed codes, -H..=H
    std::array<int32_t, 3> angular_velocity{};  // signed codes, -H..=H

    bool operator==(const Entity& o) const {
        return id == o.id && position == o.position && largest == o.largest &&
               rotation == o.rotation && linear_velocity == o.linear_velocity &&
               angular_velocity == o.angular_velocity;
    }
};

struct Snapshot {
    uint32_t tick = 0;
    std::vector<Entity> entities;  // ascending ids
};

enum class ErrorKind {
    None,
    Truncated,
    OutOfBounds,
    UnknownFormat,
    BaselineMismatch,
    BaselineConflict,
    TrailingBytes,
    NonZeroPadding,
};

struct Error {
    ErrorKind kind = ErrorKind::None;
    uint64_t value = 0;  // OutOfBounds: the value; UnknownFormat: the byte; conflicts: the id
    uint64_t max = 0;    // OutOfBounds: the bound
};

// The entity's state in SI units: position (m), rotation (x, y, z, w), velocities.
struct EntitySi {
    uint32_t id;
    std::array<double, 3> position;
    std::array<double, 4> rotation;
    std::array<double, 3> linear_velocity;
    std::array<double, 3> angular_velocity;
};

namespace detail {

// Reads the stream least significant bit first (section 1). The first error sticks: later
// reads return zeros, and the decoder checks the error before it keeps any result.
class BitReader {
   public:
    BitReader(const uint8_t* bytes, size_t len) : bytes_(bytes), len_(len) {}

    // `bits` is at most 32.
    uint64_t read(uint32_t bits) {
        if (error_.kind != ErrorKind::None) return 0;
        if (pos_ + bits > len_ * 8) {
            fail({ErrorKind::Truncated, 0, 0});
            return 0;
        }
        // Up to eight bytes from pos / 8, least significant first: 57 bits or more after the
        // shift, and no field is wider than 32.
        uint64_t word = 0;
        size_t first = pos_ / 8;
        for (size_t k = 0; k < 8 && first + k < len_; ++k) {
            word |= uint64_t(bytes_[first + k]) << (8 * k);
        }
        word >>= pos_ % 8;
        pos_ += bits;
        return word & ((uint64_t(1) << bits) - 1);
    }

    // A value that must be at most max.
    uint64_t read_at_most(uint32_t bits, uint64_t max) {
        uint64_t value = read(bits);
        if (value > max) fail({ErrorKind::OutOfBounds, value, max});
        return value;
    }

    void fail(Error e) {
        if (error_.kind == ErrorKind::None) error_ = e;
    }
    bool ok() const { return error_.kind == ErrorKind::None; }
    const Error& error() const { return error_; }
    size_t pos() const { return pos_; }
    void seek(size_t pos) { pos_ = pos; }
    size_t bit_len() const { return len_ * 8; }

    // Only zero padding to the end of the last byte may remain.
    void finish() {
        if (!ok()) return;
        size_t used = (pos_ + 7) / 8;
        if (used != len_) {
            fail({ErrorKind::TrailingBytes, len_ - used, 0});
            return;
        }
        while (pos_ < len_ * 8) {
            if ((bytes_[pos_ / 8] >> (pos_ % 8)) & 1) {
                fail({ErrorKind::NonZeroPadding, 0, 0});
                return;
            }
            ++pos_;
        }
    }

   private:
    const uint8_t* bytes_;
    size_t len_;
    size_t pos_ = 0;
    Error error_;
};

// An id from its gap code (section 4); `previous` is null for the first.
inline uint32_t read_id(BitReader& r, const uint32_t* previous) {
    uint32_t ones = 0;
    while (ones < 3 && r.read(1) == 1) ++ones;
    static constexpr uint32_t kValueBits[4] = {0, 3, 8, 32};
    uint64_t gap = r.read(kValueBits[ones]);
    uint64_t id = previous ? uint64_t(*previous) + 1 + gap : gap;
    if (id > 0xffffffffull) r.fail({ErrorKind::OutOfBounds, id, 0xffffffffull});
    return uint32_t(id);
}

inline std::array<uint32_t, 3> read_position(BitReader& r, const Config& c) {
    std::array<uint32_t, 3> code{};
    for (int a = 0; a < 3; ++a) {
        code[a] = uint32_t(r.read_at_most(c.position_bits[a], c.position_steps[a]));
    }
    return code;
}

inline void read_rotation(BitReader& r, const Config& c, Entity& e) {
    e.largest = uint8_t(r.read(2));
    for (int k = 0; k < 3; ++k) e.rotation[k] = uint16_t(r.read(c.rotation_bits));
}

inline std::array<int32_t, 3> read_velocity(BitReader& r, uint32_t bits, uint32_t half) {
    std::array<int32_t, 3> code{};
    for (int k = 0; k < 3; ++k) {
        code[k] = int32_t(r.read_at_most(bits, 2ull * half)) - int32_t(half);
    }
    return code;
}

// A spawned entity's BODY (section 4): the moving flags, position, rotation, velocities.
inline Entity read_body(BitReader& r, const Config& c, uint32_t id) {
    Entity e;
    e.id = id;
    uint64_t flags = r.read(2);
    e.position = read_position(r, c);
    read_rotation(r, c, e);
    if (flags & 1) e.linear_velocity = read_velocity(r, c.linear_bits, c.linear_half);
    if (flags & 2) e.angular_velocity = read_velocity(r, c.angular_bits, c.angular_half);
    return e;
}

inline Error refuse_count(uint64_t count, uint64_t max) {
    return {ErrorKind::OutOfBounds, count, max};
}

// Section 5: columns of flags, positions and rotations, then ids, then the velocities.
inline void read_full(BitReader& r, const Config& c, uint32_t count, Snapshot& out) {
    size_t flags_at = r.pos();
    size_t position_stride = c.position_bits[0] + c.position_bits[1] + c.position_bits[2];
    size_t rotation_stride = 2 + 3 * c.rotation_bits;
    size_t positions_at = flags_at + 2 * size_t(count);
    size_t rotations_at = positions_at + position_stride * count;
    size_t ids_at = rotations_at + rotation_stride * count;
    if (ids_at > r.bit_len()) {
        r.fail({ErrorKind::Truncated, 0, 0});
        return;
    }
    std::vector<uint8_t> flags(count);
    out.entities.resize(count);
    for (uint32_t i = 0; i < count; ++i) {
        Entity& e = out.entities[i];
        r.seek(flags_at + 2 * size_t(i));
        flags[i] = uint8_t(r.read(2));
        r.seek(positions_at + position_stride * i);
        e.position = read_position(r, c);
        r.seek(rotations_at + rotation_stride * i);
        read_rotation(r, c, e);
    }
    r.seek(ids_at);
    for (uint32_t i = 0; i < count; ++i) {
        out.entities[i].id = read_id(r, i == 0 ? nullptr : &out.entities[i - 1].id);
    }
    for (uint32_t i = 0; i < count; ++i) {
        if (!(flags[i] & 1)) continue;
        out.entities[i].linear_velocity = read_velocity(r, c.linear_bits, c.linear_half);
    }
    for (uint32_t i = 0; i < count; ++i) {
        if (!(flags[i] & 2)) continue;
        out.entities[i].angular_velocity = read_velocity(r, c.angular_bits, c.angular_half);
    }
}

inline int32_t unzigzag(uint64_t v) { return int32_t(v >> 1) ^ -int32_t(v & 1); }

// One component's change of `width` bits: the zigzag of new - old; the result must lie in
// [lo, hi] (section 6).
template <typename T>
T add_delta(BitReader& r, uint32_t width, T value, int64_t lo, int64_t hi) {
    int64_t sum = int64_t(value) + unzigzag(r.read(width));
    if (sum < lo || sum > hi) {
        r.fail({ErrorKind::OutOfBounds, uint64_t(sum - lo), uint64_t(hi - lo)});
    }
    return T(sum);
}

// Section 6: an update record's widths and changes, applied to `e`.
inline void read_update(BitReader& r, const Config& c, Entity& e) {
    uint64_t all = r.read(16);
    if (r.ok() && all == 0) r.fail({ErrorKind::OutOfBounds, 1, 0});
    uint32_t w[4];
    for (int f = 0; f < 4; ++f) w[f] = uint32_t((all >> (4 * f)) & 15);
    if (w[0] == kWidthAbsolute) {
        e.position = read_position(r, c);
    } else {
        for (int a = 0; a < 3; ++a) {
            e.position[a] = add_delta(r, w[0], e.position[a], 0, c.position_steps[a]);
        }
    }
    if (w[1] == kWidthAbsolute) {
        read_rotation(r, c, e);
    } else {
        int64_t max = (int64_t(1) << c.rotation_bits) - 1;
        for (int k = 0; k < 3; ++k) e.rotation[k] = add_delta(r, w[1], e.rotation[k], 0, max);
    }
    const uint32_t bits[2] = {c.linear_bits, c.angular_bits};
    const int64_t half[2] = {c.linear_half, c.angular_half};
    std::array<int32_t, 3>* velocity[2] = {&e.linear_velocity, &e.angular_velocity};
    for (int v = 0; v < 2; ++v) {
        uint32_t width = w[2 + v];
        std::array<int32_t, 3>& value = *velocity[v];
        if (width == kWidthAbsolute) {
            value = std::array<int32_t, 3>{};
            if (r.read(1) == 1) value = read_velocity(r, bits[v], uint32_t(half[v]));
        } else {
            for (int k = 0; k < 3; ++k) value[k] = add_delta(r, width, value[k], -half[v], half[v]);
        }
    }
}

// Section 6: the records merged with the baseline by id.
inline void read_delta(BitReader& r, const Config& c, uint32_t count, const Snapshot& baseline,
                       Snapshot& out) {
    const std::vector<Entity>& old = baseline.entities;
    size_t i = 0;
    uint32_t previous = 0;
    auto push = [&](const Entity& e) {
        if (out.entities.size() >= c.entities_max) {
            r.fail(refuse_count(out.entities.size() + 1, c.entities_max));
            return;
        }
        out.entities.push_back(e);
    };
    for (uint32_t k = 0; k < count && r.ok(); ++k) {
        uint32_t id = read_id(r, k == 0 ? nullptr : &previous);
        previous = id;
        if (!r.ok()) return;
        while (i < old.size() && old[i].id < id && r.ok()) push(old[i++]);
        bool in_baseline = i < old.size() && old[i].id == id;
        bool update = r.read(1) == 0;
        bool despawn = !update && r.read(1) == 1;
        if (!r.ok()) return;
        if (update && in_baseline) {
            Entity e = old[i++];
            read_update(r, c, e);
            if (r.ok()) push(e);
        } else if (despawn && in_baseline) {
            ++i;
        } else if (!update && !despawn && !in_baseline) {
            Entity e = read_body(r, c, id);
            if (r.ok()) push(e);
        } else {
            r.fail({ErrorKind::BaselineConflict, id, 0});
        }
    }
    while (i < old.size() && r.ok()) push(old[i++]);
}

// A gap code (section 4) on its own, for the column delta's exceptions.
inline uint64_t read_gap(BitReader& r) {
    uint32_t ones = 0;
    while (ones < 3 && r.read(1) == 1) ++ones;
    static constexpr uint32_t kValueBits[4] = {0, 3, 8, 32};
    return r.read(kValueBits[ones]);
}

// Zero bits from `from` to `to` (padding between sections), or a NonZeroPadding error.
inline void expect_zeros(BitReader& r, size_t from, size_t to) {
    for (size_t b = from; b < to && r.ok(); ++b) {
        r.seek(b);
        if (r.read(1) != 0) r.fail({ErrorKind::NonZeroPadding, 0, 0});
    }
}

// The column delta (format 0x03, section 6): the baseline merged with the
// edits, the updates added by index into that result, then the exceptions written over them.
// Written for clarity: every value is read with its own seek.
inline void read_columns(BitReader& r, const Config& c, uint32_t updates,
                         const Snapshot& baseline, Snapshot& out) {
    uint64_t exceptions = r.read(32);
    uint64_t edits = r.read(16);
    uint64_t first = r.read(16);
    // The gap width, then the twelve component columns: position x, y, z, the three rotation
    // codes, linear x, y, z, angular x, y, z.
    uint32_t width[13];
    width[0] = uint32_t(r.read_at_most(8, 15));
    for (int col = 1; col < 13; ++col) width[col] = uint32_t(r.read_at_most(4, 14));
    if (!r.ok()) return;
    const std::vector<Entity>& old = baseline.entities;
    auto push = [&](const Entity& e) {
        if (out.entities.size() >= c.entities_max) {
            r.fail(refuse_count(out.entities.size() + 1, c.entities_max));
            return;
        }
        out.entities.push_back(e);
    };
    size_t i = 0;
    uint32_t previous = 0;
    for (uint64_t k = 0; k < edits && r.ok(); ++k) {
        uint32_t id = read_id(r, k == 0 ? nullptr : &previous);
        previous = id;
        bool spawn = r.read(1) == 1;
        if (!r.ok()) return;
        while (i < old.size() && old[i].id < id && r.ok()) push(old[i++]);
        bool present = i < old.size() && old[i].id == id;
        if (spawn == present) {
            r.fail({ErrorKind::BaselineConflict, id, 0});
            return;
        }
        if (!spawn) {
            ++i;
            continue;
        }
        Entity e = read_body(r, c, id);
        if (r.ok()) push(e);
    }
    while (i < old.size() && r.ok()) push(old[i++]);
    if (!r.ok()) return;
    // Each section starts on a byte; the columns' sizes follow from the header.
    size_t start[14];
    start[0] = (r.pos() + 7) / 8;
    expect_zeros(r, r.pos(), start[0] * 8);
    for (int col = 0; col < 13 && r.ok(); ++col) {
        size_t bits = size_t(updates) * width[col];
        start[col + 1] = start[col] + (bits + 7) / 8;
        if (start[col + 1] * 8 > r.bit_len()) {
            r.fail({ErrorKind::Truncated, 0, 0});
            return;
        }
        expect_zeros(r, start[col] * 8 + bits, start[col + 1] * 8);
    }
    if (!r.ok()) return;
    std::vector<size_t> index(updates);
    const int64_t lo[4] = {0, 0, -int64_t(c.linear_half), -int64_t(c.angular_half)};
    const int64_t rotation_max = (int64_t(1) << c.rotation_bits) - 1;
    uint64_t next = first;
    for (uint32_t k = 0; k < updates && r.ok(); ++k) {
        r.seek(start[0] * 8 + size_t(k) * width[0]);
        next += r.read(width[0]);
        if (next >= out.entities.size()) {
            uint64_t max = out.entities.empty() ? 0 : out.entities.size() - 1;
            r.fail({ErrorKind::OutOfBounds, next, max});
            return;
        }
        index[k] = size_t(next);
        Entity& e = out.entities[index[k]];
        next += 1;
        for (int f = 0; f < 4; ++f) {
            for (int a = 0; a < 3; ++a) {
                int col = 1 + 3 * f + a;
                r.seek(start[col] * 8 + size_t(k) * width[col]);
                uint32_t w = width[col];
                if (f == 0) e.position[a] = add_delta(r, w, e.position[a], 0, c.position_steps[a]);
                if (f == 1) e.rotation[a] = add_delta(r, w, e.rotation[a], 0, rotation_max);
                std::array<int32_t, 3>& v = f == 2 ? e.linear_velocity : e.angular_velocity;
                if (f >= 2) v[a] = add_delta(r, w, v[a], lo[f], -lo[f]);
            }
        }
    }
    r.seek(start[13] * 8);
    uint64_t update = 0;
    for (uint64_t x = 0; x < exceptions && r.ok(); ++x) {
        update += read_gap(r);
        uint64_t field = r.read(2);
        if (!r.ok()) return;
        if (update >= updates) {
            r.fail({ErrorKind::OutOfBounds, update, updates == 0 ? 0 : updates - 1u});
            return;
        }
        Entity& e = out.entities[index[update]];
        if (field == 0) e.position = read_position(r, c);
        if (field == 1) read_rotation(r, c, e);
        std::array<int32_t, 3>* velocity[2] = {&e.linear_velocity, &e.angular_velocity};
        const uint32_t bits[2] = {c.linear_bits, c.angular_bits};
        const uint32_t half[2] = {c.linear_half, c.angular_half};
        if (field >= 2) {
            int v = int(field) - 2;
            *velocity[v] = std::array<int32_t, 3>{};
            if (r.read(1) == 1) *velocity[v] = read_velocity(r, bits[v], half[v]);
        }
    }
}

}  // namespace detail

// The header fields shared by both kinds (sections 5 and 6).
struct Header {
    bool delta = false;
    uint32_t tick = 0;
    uint32_t baseline_tick = 0;  // deltas only
    uint32_t count = 0;          // entities (full), records (delta) or updates (columns)
    bool columns = false;        // a column delta
};

inline Error peek_header(const uint8_t* bytes, size_t len, Header& header) {
    detail::BitReader r(bytes, len);
    uint64_t format = r.read(8);
    header.tick = uint32_t(r.read(32));
    if (!r.ok()) return r.error();
    if (format != kFormatFull && format != kFormatDelta && format != kFormatDeltaColumns) {
        return {ErrorKind::UnknownFormat, format, 0};
    }
    header.delta = format != kFormatFull;
    header.columns = format == kFormatDeltaColumns;
    if (header.delta) header.baseline_tick = uint32_t(r.read(32));
    header.count = uint32_t(r.read(16));
    return r.error();
}

// Decodes a full or delta snapshot into `out`. A delta needs `baseline`, the snapshot of the
// tick its header names. On error `out` is left empty.
inline Error decode(const Config& c, const uint8_t* bytes, size_t len, const Snapshot* baseline,
                    Snapshot& out) {
    out.entities.clear();
    Header h;
    Error e = peek_header(bytes, len, h);
    if (e.kind != ErrorKind::None) return e;
    out.tick = h.tick;
    detail::BitReader r(bytes, len);
    r.seek(h.delta ? 8 + 32 + 32 + 16 : 8 + 32 + 16);
    if (!h.delta) {
        if (h.count > c.entities_max) return detail::refuse_count(h.count, c.entities_max);
        detail::read_full(r, c, h.count, out);
    } else {
        if (baseline == nullptr || baseline->tick != h.baseline_tick) {
            return {ErrorKind::BaselineMismatch, h.baseline_tick, 0};
        }
        if (baseline->entities.size() > c.entities_max) {
            return detail::refuse_count(baseline->entities.size(), c.entities_max);
        }
        if (h.columns) {
            detail::read_columns(r, c, h.count, *baseline, out);
        } else {
            detail::read_delta(r, c, h.count, *baseline, out);
        }
    }
    r.finish();
    if (!r.ok()) out.entities.clear();
    return r.error();
}

// Section 3: an entity's codes in SI units.
inline EntitySi to_si(const Config& c, const Entity& e) {
    EntitySi si{};
    si.id = e.id;
    for (int a = 0; a < 3; ++a) {
        double p = c.position_min[a] + e.position[a] * c.position_precision;
        si.position[a] = std::min(p, c.position_max[a]);
    }
    const double m = double((uint32_t(1) << c.rotation_bits) - 2);
    const double root2 = std::sqrt(2.0);
    double q[4];
    double squares = 0;
    int k = 0;
    for (int i = 0; i < 4; ++i) {
        if (i == e.largest) continue;
        double code = std::min<double>(e.rotation[k++], m);
        q[i] = code * root2 / m - 1 / root2;
        squares += q[i] * q[i];
    }
    q[e.largest] = std::sqrt(std::max(0.0, 1 - squares));
    double norm = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    for (int i = 0; i < 4; ++i) si.rotation[i] = q[i] / norm;
    for (int k2 = 0; k2 < 3; ++k2) {
        si.linear_velocity[k2] = e.linear_velocity[k2] * c.linear_precision;
        si.angular_velocity[k2] = e.angular_velocity[k2] * c.angular_precision;
    }
    return si;
}

}  // namespace rally::wire
