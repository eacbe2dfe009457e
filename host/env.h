// env.h: the environment knobs (test hooks, pins), read by one strict parser.
//
//   fa::env_value(name)                      the variable's text; nullopt when unset or empty
//   fa::parse_whole(text, lo, hi)            a whole decimal number in [lo, hi], or nullopt
//   fa::env_int(name, lo, hi, what)          a knob that holds a number: nullopt when not set,
//                                            else the number, or UsageError
//   fa::env_switch(name, unset, what)        a knob that is 0 (off) or 1 (on): `unset` when not set
//
// A knob that is set to anything else than what it accepts is an error, never a guess: atoi would
// read FA_STEP22_SPLITS=8abc as 8 and FA_STEP16_WAVE=abc as 0. The UsageError names the variable, its
// value and what it accepts, "FA_STEP22_SPLITS=8abc: expected a whole number from 1 to 64 (the
// number of splits)", so the executable exits with kExitUsage (2) and that sentence. Empty means
// not set (FA_X= is how a shell unsets a variable for one command).
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace fa {

// The value of environment variable `name`; nullopt when it is unset or empty.
std::optional<std::string> env_value(const char* name);

// `text` as a whole decimal number within [lo, hi]: the digits 0-9, after a '-' for a negative number,
// and nothing else (no spaces, no '+', no "-0", no trailing characters); nullopt otherwise, an
// out-of-range value included (however many digits it has).
std::optional<long long> parse_whole(std::string_view text, long long lo, long long hi);

// Knob `name` as a whole number in [lo, hi]; nullopt when not set. Anything else throws UsageError
// "<name>=<value>: expected a whole number from <lo> to <hi> (<what>)".
std::optional<int> env_int(const char* name, int lo, int hi, const char* what);

// Knob `name` as a switch: 0 is off, 1 is on, not set is `unset`. Anything else throws UsageError
// "<name>=<value>: expected 0 or 1 (<what>)".
bool env_switch(const char* name, bool unset, const char* what);

}  // namespace fa
