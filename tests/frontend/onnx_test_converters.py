"""Converters of a private ONNX domain ("tessera.test") for the frontend core tests, so that they
do not depend on the op-family converters being written beside them."""
from tessera.frontend.onnx_ops import converter, supported_ops

DOMAIN = "tessera.test"


def _register():
    if f"{DOMAIN}::TAdd" in supported_ops():
        return

    @converter("TAdd", domain=DOMAIN)
    def _add(ctx):
        return ctx.op("add", ctx.input(0), ctx.input(1))

    @converter("TCopy", domain=DOMAIN)
    def _copy(ctx):
        return ctx.op("copy", ctx.input(0))

    @converter("TPair", domain=DOMAIN)          # two outputs: (x + x, -x); optional second input
    def _pair(ctx):
        x = ctx.input(0)
        y = ctx.input(1, optional=True)
        first = ctx.op("add", x, x if y is None else y)
        return first, ctx.op("negative", x)

    @converter("TFirstOnly", domain=DOMAIN)     # declares two outputs, produces one
    def _first(ctx):
        return ctx.op("copy", ctx.input(0)), None

    @converter("TReshapeTo", domain=DOMAIN)     # needs its second input as a constant
    def _reshape(ctx):
        shape = ctx.const_input(1)
        x = ctx.input(0)
        return ctx.op("add", x, ctx.const(shape.astype(x.type.dtype.numpy()).sum() * 0))

    @converter("TReshapeShape", domain=DOMAIN)  # takes a shape with symbolic dims (ctx.shape_input)
    def _reshape_shape(ctx):
        return ctx.op("reshape", ctx.input(0), newshape=ctx.shape_input(1))

    @converter("TBuggy", domain=DOMAIN)         # a converter bug
    def _buggy(ctx):
        return {}["missing"]

    @converter("TRefuse", domain=DOMAIN)
    def _refuse(ctx):
        ctx.unsupported(f"mode={ctx.attr('mode')!r} is not implemented")


_register()
