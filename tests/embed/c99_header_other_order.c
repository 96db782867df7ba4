/* rudder_plugin.h first, then rudder.h: the shared status and log level types and values are defined once either
 * way. */
#include <rudder/rudder.h>
#include <rudder/rudder_plugin.h>

int other_order_status_ok(void);
int other_order_status_ok(void) {
    rudder_status status = RUDDER_ERR_CANCELLED;
    rudder_log_level level = RUDDER_LOG_OFF;
    return status == 5 && RUDDER_ERR_BUSY == 102 && RUDDER_ABI_MAJOR == 1 && level == RUDDER_LOG_LEVEL_OFF;
}
