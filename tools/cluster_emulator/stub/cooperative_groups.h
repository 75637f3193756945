#pragma once
// The cluster emulator's <cooperative_groups.h>: this_cluster() with block_rank() and map_shared_rank()
// (emu_runtime.h).
#include "emu_runtime.h"
