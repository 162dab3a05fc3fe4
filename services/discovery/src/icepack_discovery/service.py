"""The discovery service: wiring for ``icepack_core.discovery``.

It lists every configured catalog on a timer (``refresh.Discovery``) and, for SQL catalogs
configured with ``notify: true``, reacts to pushed commits as they happen
(``push.CatalogWatcher``), as it does for catalogs with an SQS queue of change events
(``sqs.SqsWatcher``), and applies change hints the gateway's hook recorded
(``hints.HintConsumer``); polling stays the safety net for anything a push misses.
"""

from __future__ import annotations

import asyncio

from icepack_core.db.resilience import loop_every, retry_db
from icepack_core.discovery.hints import HintConsumer
from icepack_core.discovery.push import CatalogWatcher
from icepack_core.discovery.refresh import Discovery, DiscoveryResult
from icepack_core.discovery.sqs import SqsWatcher
from icepack_core.runtime.service import Service, ServiceContext
from icepack_core.types import Topic


class DiscoveryService(Service):
    name = "discovery"

    async def run(self, ctx: ServiceContext) -> int:
        discovery = Discovery(ctx.settings, ctx.pool)
        # Postgres may go away while the service starts (a restart, a failover): wait it out.
        await retry_db(discovery.mark_listing_started, ctx.stop, ctx.log, "discovery.start")
        watchers: list[CatalogWatcher | SqsWatcher] = [
            CatalogWatcher(ctx.pool, discovery.catalogs, cfg)
            for cfg in discovery.configs
            if cfg.notify
        ]
        watchers += [
            SqsWatcher(ctx.pool, discovery.catalogs, cfg)
            for cfg in discovery.configs
            if cfg.sqs_queue_url
        ]

        async def once() -> DiscoveryResult:
            result = await discovery.run_once()
            ctx.log.info(
                "discovery.pass",
                discovered=result.discovered,
                changed=result.changed,
                dropped=result.dropped,
                failed=sorted(result.errors),
            )
            return result

        hints = HintConsumer(ctx.pool, discovery.catalogs, {c.name: c for c in discovery.configs})
        await asyncio.gather(
            loop_every(
                ctx.settings.discovery_interval_seconds, ctx.stop, once, ctx.log, "discovery"
            ),
            hints.run(ctx.stop, ctx.listener.subscribe([Topic.CATALOG_HINTED])),
            *(watcher.run(ctx.stop) for watcher in watchers),
        )
        return 0
