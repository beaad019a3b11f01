"""The placement rules: Nova's NUMA and PCI fit, GPU sets, device choice, fabric domains.

Pure functions over the typed request (:mod:`cortex.request`) and the knowledge view's
host state and GPU topology (:mod:`cortex.knowledge.topology`), each citing the Nova,
Placement or published rule it follows. The plugins (:mod:`cortex.plugins`) are thin
adapters from the pipeline contract to these rules; the simulator and the scheduler
call them too. Nothing here touches a database or the HTTP layer.
"""
