class AttentionCore(nn.Module):
    """Attention Core

    The attention core computes one head's softmax over the window slots and the learned
    sink. The query scores against the latent at every slot. The scores are exponentiated.
    One copy is summed into the denominator together with the exponentiated sink logit. The
    reciprocal of that sum scales the exponentials contracted against the latents. Every
    score is multiplied by one over the square root of the latent width, which is 512 in the
    released model, before it is exponentiated. The scale keeps the spread of the scores the
    same at any width, so the softmax does not put nearly all of its weight on one slot. The
    sink logit is one learned number per head that lets the head give part of its weight to
    no slot. The sink logit is exponentiated with no scale.

    Inputs: scalar: Q(FP32)[], x_c: Q(BF16)[x, c], x_w_x_c: Q(BF16)[x, w|x, c].
    Returns: Q(BF16)[x, c].
    """

    def __init__(self, *, c=64, quant='exact'):
        super().__init__()
        self.c = c
        self.emulate = quant == "emulate"

    def forward(self, scalar, x_c, x_w_x_c):
        contraction = torch.einsum('...xc,...xwc->...xw', x_c, x_w_x_c)  # [x, w|x]
        if self.emulate:
            contraction = round_fp32(contraction)  # held in Q(FP32)
        # \lvert c \rvert^{-1/2} x
        abs_c_1_2_x = contraction / math.sqrt(self.c)  # [x, w|x]
        if self.emulate:
            abs_c_1_2_x = round_fp32(abs_c_1_2_x)  # held in Q(FP32)
        e_x = torch.exp(abs_c_1_2_x)  # [x, w|x]
        if self.emulate:
            e_x = round_fp32(e_x)  # held in Q(FP32)
        e_x_2 = torch.exp(scalar)  # []
        if self.emulate:
            e_x_2 = round_fp32(e_x_2)  # held in Q(FP32)
        total = e_x.sum(dim=-1)  # [x]
        if self.emulate:
            total = round_fp32(total)  # held in Q(FP32)
        total_2 = e_x_2[..., None] + total  # [x]
        if self.emulate:
            total_2 = round_fp32(total_2)  # held in Q(FP32)
        # z^{-1}
        z_1 = 1 / total_2  # [x]
        if self.emulate:
            z_1 = round_fp32(z_1)  # held in Q(FP32)
        # Cast
        as_bf16 = round_bf16(e_x) if self.emulate else e_x  # held in Q(BF16)
        contraction_2 = torch.einsum('...xw,...xwc->...xc', as_bf16, x_w_x_c)  # [x, c]
        if self.emulate:
            contraction_2 = round_fp32(contraction_2)  # held in Q(FP32)
        product = z_1[..., None] * contraction_2  # [x, c]
        if self.emulate:
            product = round_fp32(product)  # held in Q(FP32)
        # Cast
        as_bf16_2 = round_bf16(product) if self.emulate else product  # held in Q(BF16)
        return as_bf16_2


PARAM_KEYS: dict[str, str] = {}
