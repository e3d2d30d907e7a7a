/* The library's one spin gauge (common/spin_gauge.h). */
#include "common/spin_gauge.h"

spin_gauge spin_gauge_process;
