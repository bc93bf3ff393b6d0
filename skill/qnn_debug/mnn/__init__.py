"""MNN's own formats and tools: ``.mnn`` models, QNN dump directories, test dirs, ModuleBasic, MNN2QNNModel.

Every module here reads or drives what MNN itself writes or runs, so a result on a phone or a host build
can be compared with any other run in the run store.
"""
