/* Prints the sizes and some field offsets of rally.h's structs as this C compiler lays them
 * out, one "name value" a line: the C# test checks its own layouts against them. */
#include "rally.h"

#include <stddef.h>
#include <stdio.h>

#define SIZE(t) printf(#t " %zu\n", sizeof(t))
#define OFFSET(t, f) printf(#t "." #f " %zu\n", offsetof(t, f))

int main(void) {
    SIZE(RallyXrInput);
    SIZE(RallyEntity);
    SIZE(RallyEvent);
    SIZE(RallyLatency);
    SIZE(RallyConnectionStats);
    SIZE(RallyConfig);
    SIZE(RallyFrame);
    OFFSET(RallyXrInput, hands);
    OFFSET(RallyXrInput, game);
    OFFSET(RallyXrInput, game_len);
    OFFSET(RallyEvent, key_len);
    OFFSET(RallyEvent, reason);
    OFFSET(RallyConnectionStats, rtt_us);
    OFFSET(RallyEntity, angular_velocity);
    OFFSET(RallyEntity, class_index);
    OFFSET(RallyEntity, hand);
    OFFSET(RallyConfig, io_thread);
    OFFSET(RallyLatency, above_model);
    OFFSET(RallyLatency, at_best);
    OFFSET(RallyConnectionStats, io_lock_waits);
    OFFSET(RallyFrame, xr_input);
    OFFSET(RallyFrame, events_count);
    OFFSET(RallyFrame, entities_count);
    OFFSET(RallyFrame, events_more);
    return 0;
}
