#pragma once
// Python's spelling and rounding of floats, for text that must equal what a Python reference writes: repr(x)
// (the shortest digits that read back as x; "1.0", "1e-05", "1e+16", "1000000000000000.0") and round(x, n).
#include <string>

namespace duet {

// repr(x) of a Python float; json.dumps writes the same, with NaN, Infinity and -Infinity for the non-finite.
std::string python_float_repr(double x);

// round(x, digits) of a Python float: x rounded to `digits` decimals, exact ties to even, then the nearest double.
double python_round(double x, int digits);

}  // namespace duet
