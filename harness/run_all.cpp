// run_all: every built step on its default problem, one table (the README's main command).
#include "runner.h"
#include "steps_list.h"

int main(int argc, char** argv) { return fa::run_all_main(argc, argv, all_steps()); }
