"""What an image build verifies as its last steps: the vendor's torch kept byte for byte, the stack's pairs and the
device's runtime."""
