"""Short device-kernel names: the kernel's own name and what its template was instantiated for."""

import pytest

from attnbench.report.kernel_names import short_kernel_name

COPY = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#3}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, 4, "
        "TrivialOffsetCalculator<1, unsigned int> >(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#3}, std::array<char*, 2ul>)")  # fmt: skip
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<"
       "float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)")  # fmt: skip
MASKED = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous "
          "namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}>(at::TensorIteratorBase&)"
          "::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast)")  # fmt: skip
FOREACH = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
           "TensorListScalarListMetadata<float, 3>, at::native::(anonymous namespace)::PointwiseOpScalarListFunctor"
           "<float, 3, 3, 0>, std::divides<float> >(at::native::TensorListScalarListMetadata<float, 3>)")  # fmt: skip
FA3 = "void cutlass::device_kernel<flash::FlashAttnFwdSm90<cute::tuple<int>, int> >(flash::FlashAttnFwdSm90<>::Params)"


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (COPY, "unrolled_elementwise_kernel<direct_copy_kernel_cuda>"),
        (MUL, "vectorized_elementwise_kernel<MulFunctor>"),
        (MASKED, "elementwise_kernel<masked_fill_kernel>"),
        (FOREACH, "multi_tensor_apply_kernel<divides>"),
        (FA3, "device_kernel<FlashAttnFwdSm90>"),
        ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_TNT", "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_TNT"),
        ("flash_fwd_kernel", "flash_fwd_kernel"),
        ("void softmax_warp_forward<8>(float*, int)", "softmax_warp_forward"),
        ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
        ("Memset (Device)", "Memset (Device)"),
    ],
)
def test_a_kernel_is_named_by_itself_and_what_it_was_built_for(name, short):
    assert short_kernel_name(name) == short


def test_a_name_longer_than_the_width_is_cut_with_an_ellipsis():
    said = short_kernel_name("k" * 100, width=20)
    assert len(said) == 20 and said.endswith("…")


def test_an_unclosed_template_still_gives_the_kernel_name():
    assert (
        short_kernel_name("void at::native::foo_kernel<at::native::copy_kernel_cuda(int")
        == "foo_kernel<copy_kernel_cuda>"
    )
