// sluice/sluice.h — everything an application needs.
#pragma once

#include <sluice/bootstrap.h>
#include <sluice/config.h>
#include <sluice/context.h>
#include <sluice/engine.h>
#include <sluice/message.h>
#include <sluice/pool.h>
#include <sluice/stats.h>
#include <sluice/status.h>
#include <sluice/version.h>
