// decode_lines: a line-oriented front end to rally_wire.hpp, for tests and tools.
//
// Each input line is `BASELINE DATAGRAM`: two hex strings, the first a full snapshot to use as
// the baseline or `-` for none. Each output line is one of
//   ok TICK COUNT, then per entity: ID PX PY PZ LARGEST R0 R1 R2 LX LY LZ AX AY AZ
//   si TICK COUNT, then per entity: ID PX PY PZ QX QY QZ QW LX LY LZ AX AY AZ (SI units)
//   err KIND VALUE MAX
// and a line `config ...` gives the derived configuration (see print_config).
// `si` replaces `ok` when the line starts with `si ` (the rest as above).
// A baseline that does not decode gives `err baseline` and the datagram is not read.

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "rally_wire.hpp"

namespace {

using rally::wire::ErrorKind;

const char* kind_name(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::None: return "None";
        case ErrorKind::Truncated: return "Truncated";
        case ErrorKind::OutOfBounds: return "OutOfBounds";
        case ErrorKind::UnknownFormat: return "UnknownFormat";
        case ErrorKind::BaselineMismatch: return "BaselineMismatch";
        case ErrorKind::BaselineConflict: return "BaselineConflict";
        case ErrorKind::TrailingBytes: return "TrailingBytes";
        case ErrorKind::NonZeroPadding: return "NonZeroPadding";
    }
    return "?";
}

bool parse_hex(const std::string& hex, std::vector<uint8_t>& out) {
    out.clear();
    if (hex.size() % 2 != 0) return false;
    for (size_t i = 0; i < hex.size(); i += 2) {
        unsigned byte = 0;
        if (std::sscanf(hex.c_str() + i, "%2x", &byte) != 1) return false;
        out.push_back(uint8_t(byte));
    }
    return true;
}

void print_codes(const rally::wire::Snapshot& s) {
    std::printf("ok %u %zu", s.tick, s.entities.size());
    for (const auto& e : s.entities) {
        std::printf(" %u %u %u %u %u %u %u %u %d %d %d %d %d %d", e.id, e.position[0],
                    e.position[1], e.position[2], e.largest, e.rotation[0], e.rotation[1],
                    e.rotation[2],
                    e.linear_velocity[0], e.linear_velocity[1], e.linear_velocity[2],
                    e.angular_velocity[0], e.angular_velocity[1], e.angular_velocity[2]);
    }
}

void print_si(const rally::wire::Config& c, const rally::wire::Snapshot& s) {
    std::printf("si %u %zu", s.tick, s.entities.size());
    for (const auto& e : s.entities) {
        auto si = rally::wire::to_si(c, e);
        std::printf(" %u", si.id);
        for (double v : si.position) std::printf(" %.9g", v);
        for (double v : si.rotation) std::printf(" %.9g", v);
        for (double v : si.linear_velocity) std::printf(" %.9g", v);
        for (double v : si.angular_velocity) std::printf(" %.9g", v);
    }
}

// `config MIN.x MIN.y MIN.z MAX.x MAX.y MAX.z PRECISION R LIN_MAX LIN_PRECISION ANG_MAX
// ANG_PRECISION` prints `config S.x S.y S.z P.x P.y P.z H_lin V_lin H_ang V_ang`.
void print_config(std::istringstream& words) {
    std::array<double, 3> min{}, max{};
    double precision = 0, lin_max = 0, lin_precision = 0, ang_max = 0, ang_precision = 0;
    uint32_t rotation_bits = 0;
    words >> min[0] >> min[1] >> min[2] >> max[0] >> max[1] >> max[2] >> precision >>
        rotation_bits >> lin_max >> lin_precision >> ang_max >> ang_precision;
    auto c = rally::wire::Config::make(min, max, precision, rotation_bits, lin_max, lin_precision,
                                       ang_max, ang_precision, 4096);
    std::printf("config %u %u %u %u %u %u %u %u %u %u\n", c.position_steps[0],
                c.position_steps[1], c.position_steps[2], c.position_bits[0], c.position_bits[1],
                c.position_bits[2], c.linear_half, c.linear_bits, c.angular_half, c.angular_bits);
}

}  // namespace

int main() {
    const auto config = rally::wire::Config::defaults();
    std::string line;
    std::vector<uint8_t> baseline_bytes, bytes;
    while (std::getline(std::cin, line)) {
        std::istringstream words(line);
        std::string first, baseline_hex, hex;
        words >> first;
        if (first == "config") {
            print_config(words);
            continue;
        }
        bool si = first == "si";
        if (si) {
            words >> baseline_hex >> hex;
        } else {
            baseline_hex = first;
            words >> hex;
        }
        bool has_baseline = baseline_hex != "-";
        if (!parse_hex(hex, bytes) || (has_baseline && !parse_hex(baseline_hex, baseline_bytes))) {
            std::printf("err input 0 0\n");
            continue;
        }
        rally::wire::Snapshot baseline, out;
        if (baseline_hex != "-") {
            auto e = rally::wire::decode(config, baseline_bytes.data(), baseline_bytes.size(),
                                         nullptr, baseline);
            if (e.kind != ErrorKind::None) {
                std::printf("err baseline 0 0\n");
                continue;
            }
        }
        const rally::wire::Snapshot* base = baseline_hex == "-" ? nullptr : &baseline;
        auto e = rally::wire::decode(config, bytes.data(), bytes.size(), base, out);
        if (e.kind != ErrorKind::None) {
            std::printf("err %s %llu %llu\n", kind_name(e.kind), (unsigned long long)e.value,
                        (unsigned long long)e.max);
            continue;
        }
        if (si) {
            print_si(config, out);
        } else {
            print_codes(out);
        }
        std::printf("\n");
    }
    return 0;
}
