// Chapter 10: the switches of the decode GEMV and their defaults (a cell's -D flags override them).
#pragma once
#ifndef MP
#define MP 8          // tokens per mma column block, padded: 8, 16, 32 or 64 (M <= MP)
#endif
#ifndef STAGES
#define STAGES 3      // stages in the weight ring (3: two boxes of 128 rows and 8 tokens, two blocks per SM)
#endif
#ifndef RED
#define RED 0         // 0: cluster DSMEM reduction, 1: TMA reduce (cp.reduce.async.bulk) into a zeroed C
#endif
#ifndef HINT
#define HINT 1        // weights evict-first, activations evict-last in L2
#endif
#ifndef PDL
#define PDL 0         // programmatic dependent launch: weights requested before griddepcontrol.wait
#endif
#ifndef ROWS
#define ROWS 128      // weight rows per block: 128 (2 row tiles of the consumers) or 64 (1: twice the blocks)
#endif
#ifndef MMA
#define MMA 0         // 0: mma.sync per warp (each warp loads every token), 1: wgmma per warpgroup (tokens read once)
#endif
#ifndef PF
#define PF 0          // weight stages requested into the L2 ahead of the ring (cp.async.bulk.prefetch.tensor); 0: none
#endif
#ifndef TOKEN_BLOCKS
#define TOKEN_BLOCKS 1  // 2: the tokens split over two blocks that share each weight tile by TMA multicast
#endif
#ifndef BOXES
#define BOXES 2       // weight boxes (rows x 64 k) per stage: 1, 2 or 4; fewer, larger stages for the same ring
#endif
