// The main() of every step executable: this step, and the step before it for --check.
// CMake's add_step() defines FA_STEP_NS (e.g. step02) and, where there is one, FA_PREV_NS.
#include "runner.h"

namespace FA_STEP_NS {
const fa::StepInfo& info();
}
#ifdef FA_PREV_NS
namespace FA_PREV_NS {
const fa::StepInfo& info();
}
#endif

int main(int argc, char** argv) {
#ifdef FA_PREV_NS
  return fa::step_main(argc, argv, FA_STEP_NS::info(), &FA_PREV_NS::info());
#else
  return fa::step_main(argc, argv, FA_STEP_NS::info(), nullptr);
#endif
}
