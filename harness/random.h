// random.h: seeded, reproducible host-side random inputs (never time or test on zeros).
#pragma once
#include <cstdint>
#include <vector>

namespace fa {

// Uniform in [lo, hi). Element i depends only on (seed, i), so a run is reproducible from its
// printed seed and the fill can be split across threads.
void fill_uniform(std::vector<float>& v, std::uint64_t seed, float lo, float hi);

// Normal with this mean and standard deviation (Marsaglia's polar method over the same generator),
// reproducible and split across threads alike: element i depends only on (seed, i).
void fill_normal(std::vector<float>& v, std::uint64_t seed, float mean = 0.f, float sd = 1.f);

// A fresh seed for tests (from the clock and a counter): every run draws new inputs. Tests print
// it so a failure can be replayed with --seed.
std::uint64_t fresh_seed();

}  // namespace fa
